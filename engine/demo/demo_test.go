package demo

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/model/synth"
)

func TestEnsureCreatesOnceThenReuses(t *testing.T) {
	cache := t.TempDir()
	r := marker{Arch: "qwen3", Preset: synth.PresetTiny, Seed: 1, DType: "bf16", Version: recipeVersion}
	ctx := context.Background()
	dir, created, err := ensure(ctx, cache, r)
	if err != nil {
		t.Fatal(err)
	}
	if !created || dir != filepath.Join(cache, Name) {
		t.Fatalf("first Ensure: dir %s created %v", dir, created)
	}
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ck.Close()
	if _, created, err = ensure(ctx, cache, r); err != nil || created {
		t.Fatalf("second Ensure: created %v err %v, want reuse", created, err)
	}
	// No temporary directories are left behind.
	ents, _ := os.ReadDir(cache)
	if len(ents) != 1 {
		t.Fatalf("cache holds %d entries, want only %s", len(ents), Name)
	}
	// A broken copy (marker gone: an interrupted older writer) is replaced.
	if err := os.Remove(filepath.Join(dir, markerFile)); err != nil {
		t.Fatal(err)
	}
	if _, created, err = ensure(ctx, cache, r); err != nil || !created {
		t.Fatalf("Ensure over a broken copy: created %v err %v", created, err)
	}
	// A different recipe rebuilds.
	r.Seed = 2
	if _, created, err = ensure(ctx, cache, r); err != nil || !created {
		t.Fatalf("Ensure with a new recipe: created %v err %v", created, err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 1 {
		t.Fatalf("cache holds %d entries after rebuilds", len(ents))
	}
}

func TestDemoRecipeIsAPreset(t *testing.T) {
	if _, err := synth.PresetShape(model.Arch(arch), preset); err != nil {
		t.Fatalf("demo recipe names an unknown preset: %v", err)
	}
}
