package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/treni-top/treni-top/engine/regfile"
)

// Size caps of the files Load reads through regfile.ReadFile, which also
// refuses a named pipe or a directory instead of blocking on it. Real
// tokenizer.json files are 2–35 MB and their binary caches smaller; a
// file past these caps is not one of them.
const (
	maxTokenizerFile = 512 << 20
	maxConfigFile    = 64 << 20
	maxMemoFile      = 4 << 10
	maxCacheFile     = 1 << 30
)

// LoadOptions configures Load.
type LoadOptions struct {
	// CacheDir holds binary caches of parsed tokenizer.json files, keyed by
	// the SHA-256 of tokenizer.json and tokenizer_config.json. Empty means
	// the default, os.UserCacheDir()/treni-top/tokenizers; "-" disables the
	// cache.
	CacheDir string
}

// LoadStats says what Load did, for the tokenizer_load stage's attributes.
type LoadStats struct {
	CacheHit   bool   // loaded from the binary cache
	CachePath  string // cache file used or written ("" when disabled)
	CacheError string // why the cache could not be read or written, if it mattered
	JSONBytes  int    // size of tokenizer.json
	Vocab      int    // VocabSize()
	Merges     int    // number of merges
	Added      int    // number of added tokens
}

// Load reads dir/tokenizer.json (and tokenizer_config.json when present)
// with the default cache directory.
func Load(dir string) (*Tokenizer, error) {
	t, _, err := LoadWith(dir, LoadOptions{})
	return t, err
}

// LoadWith is Load with options; it also reports what it did.
//
// With a cache directory, a hit costs a stat of both files, a read of the
// small memo that maps their (path, size, mtime) to the content hash, and
// a read of the binary cache: tokenizer.json is neither read nor hashed.
// When the memo is missing or stale the files are read and hashed, and the
// cache (keyed by that SHA-256) is used or written.
func LoadWith(dir string, opt LoadOptions) (*Tokenizer, LoadStats, error) {
	var st LoadStats
	path := filepath.Join(dir, "tokenizer.json")
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfgData, err := regfile.ReadFile(cfgPath, maxConfigFile)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, st, fmt.Errorf("reading tokenizer config %s: %w", cfgPath, err)
		}
		cfgData = nil
	}
	cfg, err := parseConfig(cfgData)
	if err != nil {
		return nil, st, fmt.Errorf("%s: %w", cfgPath, err)
	}

	cacheDir := opt.CacheDir
	if cacheDir == "" {
		if ucd, err := os.UserCacheDir(); err == nil {
			cacheDir = filepath.Join(ucd, "treni-top", "tokenizers")
		} else {
			cacheDir = "-"
		}
	}
	memo := ""
	if cacheDir != "-" {
		memo = statMemoPath(cacheDir, path, cfgPath)
		if memo != "" {
			if key, err := regfile.ReadFile(memo, maxMemoFile); err == nil && validKey(string(key)) {
				cacheFile := filepath.Join(cacheDir, string(key)+".tok")
				if t, err := readCache(cacheFile); err == nil {
					t.applyConfig(cfg)
					st.CacheHit, st.CachePath = true, cacheFile
					if fi, err := os.Stat(path); err == nil {
						st.JSONBytes = int(fi.Size())
					}
					st.fill(t)
					return t, st, nil
				}
			}
		}
	}

	data, err := regfile.ReadFile(path, maxTokenizerFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, st, fmt.Errorf("no tokenizer.json in %s: point at a Hugging Face model directory that has one (or write one with 'treni-top model synth'): %w", dir, err)
		}
		return nil, st, fmt.Errorf("reading tokenizer %s: %w", path, err)
	}
	st.JSONBytes = len(data)
	var cacheFile string
	if cacheDir != "-" {
		key := cacheKey(data, cfgData)
		cacheFile = filepath.Join(cacheDir, key+".tok")
		st.CachePath = cacheFile
		t, err := readCache(cacheFile)
		if err == nil {
			t.applyConfig(cfg)
			st.CacheHit = true
			st.fill(t)
			writeMemo(memo, key)
			return t, st, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			st.CacheError = err.Error()
		}
	}

	t, err := parse(data, cfg)
	if err != nil {
		return nil, st, fmt.Errorf("%s: %w", path, err)
	}
	t.applyConfig(cfg)
	if cacheFile != "" {
		if err := writeCache(cacheFile, t); err != nil {
			// A read-only or full cache directory must not stop the load.
			st.CacheError = err.Error()
		} else {
			writeMemo(memo, strings.TrimSuffix(filepath.Base(cacheFile), ".tok"))
		}
	}
	st.fill(t)
	return t, st, nil
}

func (st *LoadStats) fill(t *Tokenizer) {
	st.Vocab = t.VocabSize()
	st.Merges = t.mergeCount
	st.Added = len(t.added)
}

// Parse builds a tokenizer from the contents of tokenizer.json and,
// optionally (nil), tokenizer_config.json, without any cache.
func Parse(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	cfg, err := parseConfig(tokenizerConfigJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	t, err := parse(tokenizerJSON, cfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t.applyConfig(cfg)
	return t, nil
}
