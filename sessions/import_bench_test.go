package sessions

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/trace"
)

// benchKinds are the kinds the import benchmarks run on.
var benchKinds = []string{"vllm", "sglang", "tgi", "llama.cpp", "ollama", "treni"}

// BenchmarkImportFile imports a 32 MB synthetic log of each kind
// (synthLog: scripts/genlog.py's shapes) into a session file, with its
// three goroutines (run with -benchmem: the allocations do not grow with
// the log's size; scripts/import-bench.sh measures peak RSS and wall and
// CPU time on 300 MB–1 GB logs; -cpuprofile shows where the time goes).
func BenchmarkImportFile(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run("kind="+kind, func(b *testing.B) {
			benchImport(b, kind, ImportOptions{Kind: kind, Ref: importRef})
		})
	}
}

// BenchmarkImportFileSerial is BenchmarkImportFile on one goroutine: the
// CPU time an import costs, whatever the cores.
func BenchmarkImportFileSerial(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run("kind="+kind, func(b *testing.B) {
			benchImport(b, kind, ImportOptions{Kind: kind, Ref: importRef, serial: true})
		})
	}
}

func benchImport(b *testing.B, kind string, opts ImportOptions) {
	data := synthLog(kind, 32<<20)
	dir := b.TempDir()
	in := filepath.Join(dir, "server.log")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ImportFile(in, filepath.Join(dir, "s.jsonl"), opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReportDigest reads the session of a 32 MB vLLM log as report
// does (OpenDigest, BuildReport, Markdown).
func BenchmarkReportDigest(b *testing.B) {
	dir := b.TempDir()
	in := filepath.Join(dir, "vllm.log")
	if err := os.WriteFile(in, synthLog("vllm", 32<<20), 0o644); err != nil {
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

// BenchmarkEventEncoding encodes the events an import writes most: a log
// line, a stage line's log line and its span, a marker.
func BenchmarkEventEncoding(b *testing.B) {
	stageText := `{"treni_stage":"v1","stage":"kv_alloc","start_ns":1748764800000000000,"end_ns":1748764800002500000,"pid":1000,"attrs":{"bytes":1503238150,"gb_per_s":30.50}}`
	events := []trace.Event{
		{At: 123456789, Kind: trace.KindLog, Log: &trace.Log{Stream: "file", Text: "INFO 06-01 08:00:00 [loggers.py:116] Engine 000: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 88.1 tokens/s, Running: 3 reqs"}},
		{At: 123456789, Run: 4, Kind: trace.KindLog, Log: &trace.Log{Stream: "file", Text: stageText, Stage: trace.StageKVAlloc}},
		{At: 123456789, Run: 4, Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StageKVAlloc, Start: 123000000, End: 123456789, Source: "engine",
			Attrs: trace.Attrs{"bytes": 1503238150.0, "gb_per_s": 30.5}}},
		{At: 123456789, Run: 4, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerLogClock,
			Attrs: trace.Attrs{"timed_lines": 9.0, "lines": 9.0, "wrapper_lines": 0.0, "untimed_lines": 0.0, "rejected_lines": 0.0}}},
	}
	var n int64
	for i := range events {
		line, _ := appendEvent(nil, &events[i], nil)
		n += int64(len(line))
	}
	b.SetBytes(n)
	b.ReportAllocs()
	b.ResetTimer()
	var buf []byte
	var order attrOrder
	for i := 0; i < b.N; i++ {
		for j := range events {
			buf, _ = appendEvent(buf[:0], &events[j], &order)
		}
	}
}

// BenchmarkLogReader reads a 32 MB log's lines (logReader: blocks, one
// string each, cleaned).
func BenchmarkLogReader(b *testing.B) {
	data := synthLog("vllm", 32<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lr, err := newLogReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		for _, ok := lr.next(); ok; _, ok = lr.next() {
		}
		if lr.err != nil {
			b.Fatal(lr.err)
		}
	}
}
