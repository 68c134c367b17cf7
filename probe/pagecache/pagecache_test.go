package pagecache

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// writeFile writes n random bytes and syncs them, so that eviction can drop
// the pages (DONTNEED skips dirty ones).
func writeFile(t testing.TB, path string, n int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.Reader, n); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestEvictThenReadRaisesResidency(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	const size = 16 << 20
	writeFile(t, path, size)

	if ok, why := CanEvict(path); !ok {
		err := Evict([]string{path})
		if !errors.Is(err, ErrCannotEvict) {
			t.Fatalf("Evict on %s: %v, want ErrCannotEvict", why, err)
		}
		t.Skip(why)
	}
	if err := Evict([]string{path}); err != nil {
		t.Fatal(err)
	}
	res, tot, err := Residency([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if tot != size {
		t.Fatalf("total = %d, want %d", tot, size)
	}
	// Freshly evicted: at most a sliver may have come back (readahead of
	// another process is not expected on a temp file).
	if res > size/8 {
		t.Fatalf("after Evict %d of %d bytes are resident", res, tot)
	}
	// Read the first half: residency must rise to at least that.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, f, size/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res2, _, err := Residency([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if res2 < size/2 || res2 <= res {
		t.Fatalf("after reading half: %d resident (was %d), want ≥ %d", res2, res, size/2)
	}
	// mincore (the fallback for kernels without cachestat) must agree with
	// cachestat. Compare them on a settled state only: after a partial read
	// the kernel's asynchronous readahead may still be in flight, and
	// cachestat counts those pages while mincore counts only up-to-date ones
	// (CI once saw 12 MiB against 16 MiB that way). Reading the whole file
	// synchronously leaves every page up to date and nothing in flight.
	f, err = os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if res2, _, err = Residency([]string{path}); err != nil {
		t.Fatal(err)
	}
	var vec []byte
	mc, err := residencyOf(path, &vec, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := mc.Resident - res2; d > size/8 || d < -size/8 {
		t.Fatalf("mincore says %d resident, cachestat %d", mc.Resident, res2)
	}
	// And eviction brings it back down.
	if err := Evict([]string{path}); err != nil {
		t.Fatal(err)
	}
	if res3, _, _ := Residency([]string{path}); res3 > size/8 {
		t.Fatalf("second Evict left %d bytes resident", res3)
	}
}

func TestEvictAfterWriteNeedsSync(t *testing.T) {
	// Evict fdatasyncs first, so a file just written (dirty pages) is
	// dropped too.
	path := filepath.Join(t.TempDir(), "fresh.gguf")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, why := CanEvict(path); !ok {
		t.Skip(why)
	}
	if err := Evict([]string{path}); err != nil {
		t.Fatal(err)
	}
	if res, _, _ := Residency([]string{path}); res > 1<<20 {
		t.Fatalf("%d bytes of a just-written file still resident after Evict", res)
	}
}

func TestTmpfsCannotEvict(t *testing.T) {
	dir := "/dev/shm"
	if ok, _ := CanEvict(dir); ok {
		t.Skip("/dev/shm is not tmpfs here")
	}
	path := filepath.Join(dir, "treni-top-test-"+filepath.Base(t.TempDir()))
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Skip(err)
	}
	defer os.Remove(path)
	err := Evict([]string{path})
	if !errors.Is(err, ErrCannotEvict) || !strings.Contains(err.Error(), "tmpfs") {
		t.Fatalf("Evict on tmpfs: %v", err)
	}
	if res, tot, _ := Residency([]string{path}); res != tot {
		t.Fatalf("tmpfs file %d of %d resident", res, tot)
	}
}

func TestResidencyErrors(t *testing.T) {
	if _, _, err := Residency([]string{"/nonexistent/model.safetensors"}); err == nil || !strings.Contains(err.Error(), "check the weight file path") {
		t.Fatalf("missing file: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.bin")
	os.WriteFile(empty, nil, 0o644)
	if res, tot, err := Residency([]string{empty}); err != nil || res != 0 || tot != 0 {
		t.Fatalf("empty file: %d %d %v", res, tot, err)
	}
}

func TestSparseFileAcrossChunks(t *testing.T) {
	// Larger than one mincore chunk, so the chunked path is exercised; a
	// sparse file costs no disk.
	path := filepath.Join(t.TempDir(), "big.safetensors")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(chunk + chunk/2)
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	files, err := Files([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if files[0].Total != size || files[0].Resident > size {
		t.Fatalf("%+v", files[0])
	}
}

func TestParseCached(t *testing.T) {
	got, err := parseCached([]byte("MemTotal:       24000000 kB\nBuffers:  10 kB\nCached:          1234 kB\nSwapCached: 0 kB\n"))
	if err != nil || got != 1234*1024 {
		t.Fatalf("parseCached = %d, %v", got, err)
	}
	if _, err := parseCached([]byte("MemTotal: 1 kB\n")); err == nil {
		t.Fatal("no Cached line accepted")
	}
	if c, err := SysCached(); err != nil || c <= 0 {
		t.Fatalf("SysCached = %d, %v", c, err)
	}
}

func TestSampler(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.safetensors")
	writeFile(t, path, 1<<20)
	files := []string{path, "/nonexistent/also.safetensors"}
	s := NewSampler(func() []string { return files })
	defer s.Close()
	got, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var pc, sys bool
	for _, sm := range got {
		switch sm.Source {
		case trace.SourcePageCache:
			pc = true
			if sm.Values[trace.MetricWeightBytes] != 1<<20 {
				t.Fatalf("total = %v", sm.Values)
			}
		case trace.SourceSystem:
			sys = sm.Values[trace.MetricSysCachedBytes] > 0
		}
	}
	if !pc || !sys {
		t.Fatalf("samples = %+v", got)
	}
	// Cached is read at most every sysCachedEvery: not on the next
	// reading.
	got, err = s.Sample(context.Background())
	if err != nil || len(got) != 1 || got[0].Source != trace.SourcePageCache {
		t.Fatalf("second reading: %+v %v", got, err)
	}
	// Only Cached when no files are known yet.
	got, err = NewSampler(nil).Sample(context.Background())
	if err != nil || len(got) != 1 || got[0].Source != trace.SourceSystem {
		t.Fatalf("no files: %+v %v", got, err)
	}
}

func touch(t *testing.T, path string, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindWeightFiles(t *testing.T) {
	root := t.TempDir()
	model := filepath.Join(root, "qwen")
	touch(t, filepath.Join(model, "config.json"), "{}")
	touch(t, filepath.Join(model, "model-00001-of-00002.safetensors"), "a")
	touch(t, filepath.Join(model, "model-00002-of-00002.safetensors"), "b")
	touch(t, filepath.Join(model, "tokenizer.json"), "{}")
	touch(t, filepath.Join(model, "original", "consolidated.pth"), "c")
	touch(t, filepath.Join(model, "a", "b", "deep.bin"), "too deep")
	gguf := filepath.Join(root, "m.gguf")
	touch(t, gguf, "GGUF")
	// A model directory reached through a symlink (WalkDir alone does not
	// descend into a symlinked root).
	linked := filepath.Join(root, "linked-qwen")
	if err := os.Symlink(model, linked); err != nil {
		t.Fatal(err)
	}

	// Hugging Face hub cache: snapshot files are symlinks to blobs.
	hub := filepath.Join(root, "hub")
	t.Setenv("HF_HUB_CACHE", hub)
	repo := filepath.Join(hub, "models--Qwen--Qwen3-4B")
	touch(t, filepath.Join(repo, "blobs", "abc123"), "weights")
	touch(t, filepath.Join(repo, "refs", "main"), "deadbeef\n")
	snap := filepath.Join(repo, "snapshots", "deadbeef")
	os.MkdirAll(snap, 0o755)
	if err := os.Symlink("../../blobs/abc123", filepath.Join(snap, "model.safetensors")); err != nil {
		t.Fatal(err)
	}

	// Ollama: a manifest naming a blob.
	ol := filepath.Join(root, "ollama")
	t.Setenv("OLLAMA_MODELS", ol)
	touch(t, filepath.Join(ol, "blobs", "sha256-0123"), "GGUF....")
	touch(t, filepath.Join(ol, "manifests", "registry.ollama.ai", "library", "synth", "latest"),
		`{"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:0123"},{"mediaType":"application/vnd.ollama.image.template","digest":"sha256:9999"}]}`)

	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"vllm", "serve", model, "--port", "8000"}, []string{
			filepath.Join(model, "model-00001-of-00002.safetensors"),
			filepath.Join(model, "model-00002-of-00002.safetensors"),
			filepath.Join(model, "original", "consolidated.pth"),
		}},
		{[]string{"treni-top", "serve", "--model", linked}, []string{
			filepath.Join(model, "model-00001-of-00002.safetensors"),
			filepath.Join(model, "model-00002-of-00002.safetensors"),
			filepath.Join(model, "original", "consolidated.pth"),
		}},
		{[]string{"llama-server", "-m", gguf}, []string{gguf}},
		{[]string{"--model=" + gguf}, []string{gguf}},
		{[]string{"vllm", "serve", "Qwen/Qwen3-4B"}, []string{filepath.Join(repo, "blobs", "abc123")}},
		{[]string{"ollama", "run", "synth"}, []string{filepath.Join(ol, "blobs", "sha256-0123")}},
		{[]string{"synth:latest", gguf, gguf}, []string{filepath.Join(ol, "blobs", "sha256-0123"), gguf}},
	}
	for _, c := range cases {
		got, err := FindWeightFiles(c.args)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		want := make([]string, len(c.want))
		for i, w := range c.want {
			want[i], _ = filepath.EvalSymlinks(w)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%v:\n got %v\nwant %v", c.args, got, want)
		}
	}
	if _, err := FindWeightFiles([]string{"ollama", "serve"}); !errors.Is(err, ErrNoWeightFiles) {
		t.Fatalf("no model on the command line: %v", err)
	}
	if _, err := FindWeightFiles([]string{"Qwen/NotDownloaded"}); !errors.Is(err, ErrNoWeightFiles) {
		t.Fatalf("hub id not in the cache: %v", err)
	}
}

// BenchmarkPageCacheSample reads the residency of a 1 GB sparse file plus
// the host's Cached: one page-cache sampler tick on a 1 GB checkpoint.
func BenchmarkPageCacheSample(b *testing.B) {
	path := filepath.Join(b.TempDir(), "1g.safetensors")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		b.Fatal(err)
	}
	f.Close()
	s := NewSampler(func() []string { return []string{path} })
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPageCacheMincore is the same reading by mincore, the fallback on
// kernels older than 6.5.
func BenchmarkPageCacheMincore(b *testing.B) {
	path := filepath.Join(b.TempDir(), "1g.safetensors")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		b.Fatal(err)
	}
	f.Close()
	var vec []byte
	for b.Loop() {
		if _, err := residencyOf(path, &vec, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPageCacheResident256M measures a file that is fully in the page
// cache: cachestat's cost grows with the cached pages.
func BenchmarkPageCacheResident256M(b *testing.B) {
	path := filepath.Join(b.TempDir(), "warm.safetensors")
	writeFile(b, path, 256<<20)
	if _, err := os.ReadFile(path); err != nil {
		b.Fatal(err)
	}
	var vec []byte
	for b.Loop() {
		if _, err := residencyOf(path, &vec, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSysCached is the /proc/meminfo part of a reading.
func BenchmarkSysCached(b *testing.B) {
	for b.Loop() {
		if _, err := SysCached(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSamplerFollowsReplacedFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	writeFile(t, path, 1<<20)
	files := []string{path}
	s := NewSampler(func() []string { return files })
	total := func() float64 {
		got, err := s.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, sm := range got {
			if sm.Source == trace.SourcePageCache {
				return sm.Values[trace.MetricWeightBytes]
			}
		}
		t.Fatalf("no pagecache sample in %+v", got)
		return 0
	}
	if total() != 1<<20 {
		t.Fatal("first reading")
	}
	// A download replaces the file by renaming a new one over it: the kept
	// descriptor must not keep reporting the old file.
	tmp := filepath.Join(dir, "w.tmp")
	writeFile(t, tmp, 2<<20)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := total(); got != 2<<20 {
		t.Fatalf("after replacement total = %v, want %d", got, 2<<20)
	}
	// A file dropped from the list is closed; Close closes the rest.
	files = nil
	total2, _ := s.Sample(context.Background())
	_ = total2
	if len(s.open.fds) != 0 {
		t.Fatalf("%d files still open after the list emptied", len(s.open.fds))
	}
	files = []string{path}
	total()
	s.Close()
	if len(s.open.fds) != 0 {
		t.Fatal("Close left files open")
	}
}

// Residency that stands still is read less and less often; a change brings
// the sampler back to every tick.
func TestSamplerBacksOffWhileStill(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	writeFile(t, path, 1<<20)
	s := NewSampler(func() []string { return []string{path} })
	defer s.Close()
	readings := func() int {
		out, err := s.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sm := range out {
			if sm.Source == trace.SourcePageCache {
				n++
			}
		}
		return n
	}
	// The first reading sets the level; then stillReadings unchanged ones.
	for i := 0; i <= stillReadings; i++ {
		if readings() != 1 {
			t.Fatalf("reading %d skipped before the residency had been still", i)
		}
	}
	if readings() != 0 {
		t.Fatal("still residency was read again at once")
	}
	// A change (the file grows) is seen at the next reading after the
	// back-off, and the sampler returns to every tick.
	time.Sleep(backoffStart + 20*time.Millisecond)
	writeFile(t, path, 2<<20)
	if readings() != 1 {
		t.Fatal("no reading after the back-off")
	}
	if readings() != 1 {
		t.Fatal("a change did not reset the back-off")
	}
}
