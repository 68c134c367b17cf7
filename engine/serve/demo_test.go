package serve

import (
	"context"
	"io"
	"testing"
)

// TestUseDemoRefusesAModel: --demo beside --model is refused before the
// demo checkpoint is looked for, and the options are left as given.
func TestUseDemoRefusesAModel(t *testing.T) {
	o := Options{ModelDir: "/models/qwen3", Stderr: io.Discard}
	err := o.UseDemo(context.Background())
	if err == nil || err.Error() != "--demo and --model both given; pick one" {
		t.Errorf("UseDemo with a model: %v", err)
	}
	if o.ModelDir != "/models/qwen3" || o.ModelID != "" || o.InitAttrs != nil {
		t.Errorf("options changed: %+v", o)
	}
}
