// Package demo provides the demo checkpoint behind `make run`: a
// random-weight Qwen3 model of a few hundred MB (so its cold stages are
// visible) with the self-trained tokenizer, created once in the user's cache
// directory and reused afterwards.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/model/synth"
)

// Name is the demo checkpoint's directory name and model id.
const Name = "demo-qwen3"

// The recipe. Changing any of these makes existing caches stale (the
// marker no longer matches) and Ensure rebuilds them.
const (
	arch   = "qwen3"
	preset = synth.PresetDemo
	seed   = 20261122
	dtype  = "bf16"
	// recipeVersion bumps when the recipe changes in a way the fields
	// above do not show.
	recipeVersion = 1
)

// markerFile is written last, inside the temp dir before the rename, so a
// directory with a valid marker is a complete checkpoint.
const markerFile = ".treni-demo.json"

type marker struct {
	Arch    string `json:"arch"`
	Preset  string `json:"preset"`
	Seed    uint64 `json:"seed"`
	DType   string `json:"dtype"`
	Version int    `json:"version"`
}

func want() marker {
	return marker{Arch: arch, Preset: preset, Seed: seed, DType: dtype, Version: recipeVersion}
}

// DefaultCacheDir is os.UserCacheDir()/treni-top/models.
func DefaultCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the user cache directory (set XDG_CACHE_HOME or HOME): %w", err)
	}
	return filepath.Join(base, "treni-top", "models"), nil
}

// Ensure returns the demo checkpoint's directory, cacheDir/demo-qwen3
// (cacheDir "" means DefaultCacheDir), creating it on first use. Creation
// writes into a temporary directory next to it and renames it into place,
// so an interrupted run never leaves a half-written model behind; an
// existing directory is reused when its marker matches the recipe and
// model.Open accepts it, and replaced otherwise. created reports whether
// this call wrote it.
func Ensure(ctx context.Context, cacheDir string) (dir string, created bool, err error) {
	return ensure(ctx, cacheDir, want())
}

// ensure is Ensure for any recipe (tests use the tiny preset).
func ensure(ctx context.Context, cacheDir string, r marker) (dir string, created bool, err error) {
	if cacheDir == "" {
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return "", false, err
		}
	}
	dir = filepath.Join(cacheDir, Name)
	if verify(dir, r) == nil {
		return dir, false, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", false, fmt.Errorf("create the model cache %s: %w", cacheDir, err)
	}
	tmp, err := os.MkdirTemp(cacheDir, "."+Name+".tmp-")
	if err != nil {
		return "", false, fmt.Errorf("create a temporary directory in %s: %w", cacheDir, err)
	}
	defer os.RemoveAll(tmp) // a no-op after a successful rename
	if _, err := synth.Write(ctx, synth.Options{Arch: r.Arch, Preset: r.Preset, OutDir: tmp, Seed: r.Seed, DType: r.DType, Force: true}); err != nil {
		return "", false, fmt.Errorf("write the demo checkpoint: %w", err)
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, markerFile), append(b, '\n'), 0o644); err != nil {
		return "", false, fmt.Errorf("write the demo marker: %w", err)
	}
	if err := verify(tmp, r); err != nil {
		return "", false, fmt.Errorf("the freshly written demo checkpoint does not open: %w", err)
	}
	if _, statErr := os.Stat(dir); statErr == nil {
		// A stale or broken copy (or one a concurrent process just
		// finished): keep a valid one, move anything else aside.
		if verify(dir, r) == nil {
			return dir, false, nil
		}
		stale, err := os.MkdirTemp(cacheDir, "."+Name+".stale-")
		if err != nil {
			return "", false, fmt.Errorf("make room for the demo checkpoint in %s: %w", cacheDir, err)
		}
		if err := os.Rename(dir, filepath.Join(stale, Name)); err != nil {
			os.RemoveAll(stale)
			return "", false, fmt.Errorf("move the stale demo checkpoint %s aside (delete it by hand): %w", dir, err)
		}
		defer os.RemoveAll(stale)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if verify(dir, r) == nil {
			return dir, false, nil // another process won the race
		}
		return "", false, fmt.Errorf("move the demo checkpoint into %s: %w", dir, err)
	}
	return dir, true, nil
}

// verify checks the marker and that the checkpoint opens.
func verify(dir string, r marker) error {
	b, err := os.ReadFile(filepath.Join(dir, markerFile))
	if err != nil {
		return err
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("demo marker %s: %w", filepath.Join(dir, markerFile), err)
	}
	if m != r {
		return errors.New("demo checkpoint was made by another recipe")
	}
	ck, err := model.Open(dir)
	if err != nil {
		return err
	}
	return ck.Close()
}
