package sessions

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchLog is a vLLM log of about mb megabytes: the shared serve fixture
// (a start of the server) followed by request chatter, repeated, as a
// production log with restarts is.
func benchLog(b *testing.B, mb int) []byte {
	b.Helper()
	startup := readFixtureFileB(b, "vllm/v0.8.5.post1-v1engine-qwen2.5-1.5b-serve.log")
	var buf bytes.Buffer
	t := time.Date(2026, 1, 5, 8, 0, 0, 0, time.UTC)
	for buf.Len() < mb<<20 {
		buf.Write(startup)
		for i := 0; i < 2000; i++ {
			buf.WriteString("INFO " + t.Format("01-02 15:04:05") + " [logger.py:39] Received request chatcmpl-1: prompt: 'Write a haiku about the sea.', params: SamplingParams(n=1, temperature=0.7, max_tokens=128)\n")
			t = t.Add(7 * time.Millisecond)
		}
	}
	return buf.Bytes()
}

func readFixtureFileB(b *testing.B, rel string) []byte {
	data, err := os.ReadFile(filepath.Join(importFixtureDir, rel))
	if err != nil {
		b.Fatalf("fixture: %v", err)
	}
	return data
}

// BenchmarkImportFile imports a 32 MB vLLM log into a session file (run
// with -benchmem: the allocations do not grow with the log's size;
// scripts/import-bench.sh measures peak RSS on 300 MB–1 GB logs).
func BenchmarkImportFile(b *testing.B) {
	data := benchLog(b, 32)
	dir := b.TempDir()
	in := filepath.Join(dir, "vllm.log")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ImportFile(in, filepath.Join(dir, "s.jsonl"), ImportOptions{Kind: "vllm", Ref: importRef}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReportDigest reads the session of that log as report does
// (OpenDigest, BuildReport, Markdown).
func BenchmarkReportDigest(b *testing.B) {
	dir := b.TempDir()
	in := filepath.Join(dir, "vllm.log")
	if err := os.WriteFile(in, benchLog(b, 32), 0o644); err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(dir, "s.jsonl")
	if _, err := ImportFile(in, out, ImportOptions{Kind: "vllm", Ref: importRef}); err != nil {
		b.Fatal(err)
	}
	st, _ := os.Stat(out)
	b.SetBytes(st.Size())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := OpenDigest(out)
		if err != nil {
			b.Fatal(err)
		}
		if md := BuildReport(s).Markdown(); !strings.Contains(md, "cold start") {
			b.Fatal("no cold start in the report")
		}
	}
}
