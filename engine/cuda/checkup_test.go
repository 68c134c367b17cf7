package cuda

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestCheckup: without --floors the checkup is the doctor's report alone,
// in text and in JSON (no floors key); with floors measured, the text
// adds them after a blank line and the JSON under "floors".
func TestCheckup(t *testing.T) {
	c, err := RunCheckup(context.Background(), false, 0)
	if err != nil || c.Floors != nil {
		t.Fatalf("RunCheckup without floors: %+v, %v", c.Floors, err)
	}
	if c.Text() != c.DoctorReport.Text() {
		t.Errorf("text %q, want the report's", c.Text())
	}
	b, err := json.Marshal(c)
	if err != nil || strings.Contains(string(b), `"floors"`) || !strings.Contains(string(b), `"usable"`) {
		t.Errorf("JSON %s (%v)", b, err)
	}

	c.Floors = &Floors{Device: "test GPU"}
	if want := c.DoctorReport.Text() + "\n" + c.Floors.Text(); c.Text() != want {
		t.Errorf("text with floors %q, want %q", c.Text(), want)
	}
	if b, _ := json.Marshal(c); !strings.Contains(string(b), `"floors":{`) {
		t.Errorf("JSON with floors %s", b)
	}
}
