package pagecache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoWeightFiles means nothing on the command line led to weight files.
var ErrNoWeightFiles = errors.New("no weight files found")

// weightExts are the checkpoint formats servers load.
var weightExts = []string{".safetensors", ".bin", ".gguf", ".pt", ".pth"}

// IsWeightFile reports whether name has a checkpoint extension.
func IsWeightFile(name string) bool {
	for _, e := range weightExts {
		if strings.HasSuffix(strings.ToLower(name), e) {
			return true
		}
	}
	return false
}

// FindWeightFiles finds the weight files a server command line refers to.
// Each argument (and the value of each --flag=value) is tried as:
//
//  1. a directory: the checkpoint files in it and one level below
//     (safetensors, .bin, .gguf, .pt, .pth), as vLLM, TGI and the built-in
//     engine read a Hugging Face model directory;
//  2. a file with a checkpoint extension (a .gguf for llama-server);
//  3. a Hugging Face hub id (Qwen/Qwen3-4B) found in the local hub cache
//     ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub):
//     the snapshot refs/main points at (else the newest), symlinks resolved
//     to the blobs that hold the bytes;
//  4. an Ollama model name (qwen2:0.5b, library/llama3) with a manifest
//     under $OLLAMA_MODELS or ~/.ollama/models: its model layer's blob.
//
// The result has resolved, de-duplicated paths in a stable order. When
// nothing is found it returns ErrNoWeightFiles wrapped with a hint.
func FindWeightFiles(args []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			_, v, ok := strings.Cut(a, "=")
			if !ok {
				continue
			}
			a = v
		}
		if a == "" {
			continue
		}
		for _, f := range weightsFor(a) {
			add(f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w in %q: name a model directory, a .safetensors/.gguf file, a Hugging Face id already in the hub cache, or an Ollama model that has been pulled", ErrNoWeightFiles, strings.Join(args, " "))
	}
	return out, nil
}

// weightsFor resolves one argument.
func weightsFor(a string) []string {
	if st, err := os.Stat(a); err == nil {
		if st.IsDir() {
			return dirWeights(a)
		}
		if IsWeightFile(a) || isGGUF(a) {
			return []string{a}
		}
		return nil
	}
	if files := hubWeights(a); len(files) > 0 {
		return files
	}
	return ollamaWeights(a)
}

// dirWeights lists checkpoint files in dir and its immediate
// subdirectories (some repositories keep shards in a subfolder), sorted.
func dirWeights(dir string) []string {
	// WalkDir does not descend into a root that is a symlink (a model
	// directory linked from elsewhere, or a Hugging Face snapshot linked
	// by hand): walk what it points to.
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			if rel != "." && (strings.Contains(rel, string(filepath.Separator)) || strings.HasPrefix(d.Name(), ".")) {
				return fs.SkipDir
			}
			return nil
		}
		if IsWeightFile(d.Name()) {
			out = append(out, p)
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// isGGUF recognises a GGUF file without the extension (Ollama blobs) by its
// magic.
func isGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = f.Read(magic[:])
	return err == nil && string(magic[:]) == "GGUF"
}

// HubCacheDir is where the Hugging Face hub cache lives, following
// huggingface_hub's own order.
func HubCacheDir() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("HUGGINGFACE_HUB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// hubWeights finds a hub id's snapshot in the cache.
func hubWeights(id string) []string {
	org, name, ok := strings.Cut(id, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") {
		return nil
	}
	repo := filepath.Join(HubCacheDir(), "models--"+org+"--"+name)
	snap := ""
	if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
		snap = filepath.Join(repo, "snapshots", strings.TrimSpace(string(ref)))
		if _, err := os.Stat(snap); err != nil {
			snap = ""
		}
	}
	if snap == "" {
		entries, err := os.ReadDir(filepath.Join(repo, "snapshots"))
		if err != nil {
			return nil
		}
		var newest fs.FileInfo
		for _, e := range entries {
			info, err := e.Info()
			if err == nil && e.IsDir() && (newest == nil || info.ModTime().After(newest.ModTime())) {
				newest = info
			}
		}
		if newest == nil {
			return nil
		}
		snap = filepath.Join(repo, "snapshots", newest.Name())
	}
	return dirWeights(snap)
}

// OllamaModelsDir is where Ollama keeps manifests and blobs.
func OllamaModelsDir() string {
	if d := os.Getenv("OLLAMA_MODELS"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".ollama", "models")
}

// ollamaWeights reads a model's manifest and returns its model layer blob.
// Names follow Ollama's defaults: host registry.ollama.ai, namespace
// library, tag latest.
func ollamaWeights(name string) []string {
	if strings.ContainsAny(name, " \t") || strings.HasPrefix(name, ".") {
		return nil
	}
	tag := "latest"
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, tag = name[:i], name[i+1:]
	}
	parts := strings.Split(name, "/")
	switch len(parts) {
	case 1:
		parts = []string{"registry.ollama.ai", "library", parts[0]}
	case 2:
		parts = []string{"registry.ollama.ai", parts[0], parts[1]}
	}
	for _, p := range parts {
		if p == "" || p == ".." {
			return nil
		}
	}
	root := OllamaModelsDir()
	b, err := os.ReadFile(filepath.Join(append(append([]string{root, "manifests"}, parts...), tag)...))
	if err != nil {
		return nil
	}
	var m struct {
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"layers"`
	}
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	var out []string
	for _, l := range m.Layers {
		if l.MediaType != "application/vnd.ollama.image.model" && l.MediaType != "application/vnd.ollama.image.projector" {
			continue
		}
		blob := filepath.Join(root, "blobs", strings.Replace(l.Digest, ":", "-", 1))
		if _, err := os.Stat(blob); err == nil {
			out = append(out, blob)
		}
	}
	return out
}
