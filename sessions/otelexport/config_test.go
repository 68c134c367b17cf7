package otelexport

import (
	"maps"
	"strings"
	"testing"
)

// TestParseHeaders: key=value pairs become headers (a value may hold '='
// or be empty); a pair without a key or '=' is refused, naming it.
func TestParseHeaders(t *testing.T) {
	h, err := ParseHeaders([]string{"authorization=Bearer a=b", "x-empty="})
	if err != nil || !maps.Equal(h, map[string]string{"authorization": "Bearer a=b", "x-empty": ""}) {
		t.Errorf("ParseHeaders = %v, %v", h, err)
	}
	for _, bad := range []string{"novalue", "=v"} {
		if _, err := ParseHeaders([]string{bad}); err == nil || !strings.Contains(err.Error(), `bad --otlp-header "`+bad+`"`) {
			t.Errorf("ParseHeaders(%q): %v", bad, err)
		}
	}
}
