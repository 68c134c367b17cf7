package serverlog

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

var fuzzKinds = []Kind{KindVLLM, KindSGLang, KindTGI, KindLlamaCpp, KindOllama, KindTreni, KindAuto, KindUnknown}

// checkSpans is what every span must satisfy whatever the input.
func checkSpans(t *testing.T, spans []trace.Span) {
	t.Helper()
	for _, s := range spans {
		if !s.Name.Valid() {
			t.Fatalf("span with unknown stage %q", s.Name)
		}
		if s.End < s.Start {
			t.Fatalf("span %s ends (%v) before it starts (%v)", s.Name, s.End, s.Start)
		}
		if s.Workers < 0 {
			t.Fatalf("span %s with %d workers", s.Name, s.Workers)
		}
	}
}

// FuzzFeed feeds two arbitrary lines (and one real stage line between
// them) to a parser of each kind: no panic, only well-formed spans.
func FuzzFeed(f *testing.F) {
	seeds := []string{
		"(Worker_TP0 pid=1) INFO 09-24 20:50:58 [default_loader.py:268] Loading weights took 12.89 seconds",
		"INFO 05-09 22:56:26 [monitor.py:33] torch.compile takes 30.79 s in total",
		"INFO 05-09 22:56:47 [gpu_model_runner.py:1686] Graph capturing finished in 21 secs, took 0.45 GiB",
		"INFO 02-16 17:02:11 gpu_executor.py:122] # GPU blocks: 9033, # CPU blocks: 512",
		"INFO 05-09 22:55:45 [gpu_model_runner.py:1347] Model loading took 2.8871 GiB and 226.791553 seconds",
		"[2026-08-27 03:45:53] Load weight end. elapsed=12.02 s, type=Qwen3MoeForCausalLM, quant=fp8, fmt=e4m3, avail mem=49.33 GB, mem usage=29.15 GB.",
		"[2026-08-27 03:46:30] Capture target decode CUDA graph end. elapsed=12.26 s, mem usage=0.34 GB, avail mem=10.54 GB.",
		"2025-07-04T12:35:58.150338Z  INFO shard-manager: text_generation_launcher: Shard ready in 48.277857716s rank=0",
		"llama_kv_cache: size = 3072.00 MiB (131072 cells,  12 layers,  1/1 seqs), K (f16): 1536.00 MiB, V (f16): 1536.00 MiB",
		`time=2024-11-08T01:05:48.331+05:30 level=INFO source=server.go:626 msg="llama runner started in 20.92 seconds"`,
		`[GIN] 2026/05/05 - 01:30:24 | 200 |  4.006473015s |       127.0.0.1 | POST     "/api/generate"`,
		`{"treni_stage":"v1","stage":"kv_alloc","start_ns":5,"end_ns":9,"attrs":{"blocks":3}}`,
		"Loading weights took 1e308 seconds",
		"Loading weights took -5 seconds",
		"(Worker_TP0 pid=1) (Worker_TP1 pid=2)",
		"[2026-08-27 03:46:30",
		"time=",
		`[GIN] | | -1s | | "/api/chat"`,
		"0.00.000.000 I ",
		`time=2025-07-18T14:51:00.217Z level=INFO source=ggml.go:365 msg="model weights" buffer=CUDA1 size="11.9 GiB"`,
		`time=2025-08-24T08:26:00.310Z level=INFO source=backend.go:321 msg="kv cache" device=CUDA0 size="936.0 MiB"`,
		`time=2025-07-18T14:51:00.217Z level=INFO source=ggml.go:362 msg="offloaded 41/41 layers to GPU"`,
		`msg="compute graph" size="1e400 GiB"`,
		"(EngineCore pid=1) INFO 05-19 02:11:48 [core.py:307] init engine (profile, create kv cache, warmup model) took 4.19 s (compilation: 1.5 s)",
		"(Worker_TP0 pid=118) INFO 05-04 01:04:19 [monitor.py:53] torch.compile took 82.29 s in total",
		"[2025-11-10 19:59:09 TP1] Capture cuda graph end. Time elapsed: 11.35 s. mem usage=1.04 GB. avail mem=11.22 GB.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:00 [gpu_worker.py:116] Sleep mode freed 12.34 GiB memory, 1.02 GiB memory is still in use.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:01 [abstract.py:233] It took 0.744026 seconds to fall asleep.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:03 [abstract.py:251] It took 0.779162 seconds to wake up tags {'weights', 'kv_cache'}.",
		"Sleep mode freed 1e400 GiB memory, -1 GiB memory is still in use.",
		"It took 9e99 seconds to wake up tags",
	}
	for i, s := range seeds {
		f.Add(uint8(i), int64(i)*int64(time.Second), s, "INFO 05-09 22:56:48 [x.py:1] Starting vLLM API server on http://0.0.0.0:8000")
	}
	f.Fuzz(func(t *testing.T, k uint8, at int64, a, b string) {
		kind := fuzzKinds[int(k)%len(fuzzKinds)]
		for _, deferred := range []bool{false, true} {
			p := NewParser(kind, trace.ClockAt(time.Unix(0, 0)))
			p.SetDeferred(deferred)
			d := time.Duration(at)
			sp, st := p.Feed(d, a)
			checkSpans(t, sp)
			if st != "" && !st.Valid() {
				t.Fatalf("stage %q", st)
			}
			sp, _ = p.Feed(d+time.Second, "INFO 05-09 22:55:45 [loader.py:458] Loading weights took 0.50 seconds")
			checkSpans(t, sp)
			sp, _ = p.Feed(d-time.Hour, b) // a line that goes back in time
			checkSpans(t, sp)
			checkSpans(t, p.Tick(d+time.Minute))
			checkSpans(t, p.Flush(d+time.Minute))
			if with, without := feedCompare(kind, deferred, []string{a, "INFO 05-09 22:55:45 [loader.py:458] Loading weights took 0.50 seconds", b, a}); with != without {
				t.Fatalf("the prefilter changed the result:\n with    %s\n without %s", with, without)
			}
			if prepared, not := preparedCompare(kind, deferred, []string{a, "INFO 05-09 22:55:45 [loader.py:458] Loading weights took 0.50 seconds", b, a}); prepared != not {
				t.Fatalf("preparing the lines changed the result:\n prepared %s\n not      %s", prepared, not)
			}
		}
	})
}

// FuzzParseTimestamp: no panic, and a time is returned only with ok.
func FuzzParseTimestamp(f *testing.F) {
	for _, s := range []string{
		"INFO 05-09 22:51:11 [__init__.py:239] x", "DEBUG 02-16 16:40:17.843 [a.py:1] x", "(Worker_TP0 pid=1) 2026-05-19 02:11:47,969 - INFO - x",
		"[2025-01-23 19:35:14 TP0] x", "2024-01-15T08:47:15.882960Z  INFO x", `time=2024-11-08T01:05:27.403+05:30 level=INFO`,
		"[GIN] 2026/05/05 - 01:30:24 | 200", "INFO [main] x | timestamp=1731008147", "0.07.611.221 I srv x",
		`{"treni_stage":"v1","end_ns":99999999999999999999}`, "2026/11/22 03:00:01.5 x", "INFO 13-45 99:99:99 [x.py:1] bad",
		"99.99.999.999 I x", "(", "(x pid=) ",
	} {
		f.Add(uint8(0), s)
		f.Add(uint8(3), s)
	}
	f.Fuzz(func(t *testing.T, k uint8, line string) {
		kind := fuzzKinds[int(k)%len(fuzzKinds)]
		ref := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
		tm, ok := ParseTimestamp(kind, line, ref)
		if !ok && !tm.IsZero() {
			t.Fatalf("not ok but time %v", tm)
		}
		if ok && tm.IsZero() {
			t.Fatalf("ok with a zero time for %q", line)
		}
		if strings.Count(line, "\n") == 0 && kind != KindAuto && kind != KindUnknown {
			c := NewLineClock(kind, ref)
			a0, _ := c.Place(Unwrap(line, ref))
			a1, _ := c.Place(Unwrap(line, ref))
			if a1 < a0 || a0 < 0 {
				t.Fatalf("LineClock went backwards: %v %v", a0, a1)
			}
		}
	})
}

// BenchmarkFeedVLLM measures the launcher's cost per line on real vLLM
// output (a single-GPU serve log and a TP8 log with interleaved workers),
// most of which are not stage lines.
func BenchmarkFeedVLLM(b *testing.B) {
	var lines []string
	for _, rel := range []string{"vllm/v0.8.5.post1-v1engine-qwen2.5-1.5b-serve.log", "vllm/v0.10.x-v1engine-qwen3-235b-fp8-tp8-l40s-multiworker.log",
		"vllm/series-upb-h100nvl-opt6.7b/v0.11.0-v1-debug.log"} {
		lines = append(lines, readFixture(b, rel)...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		p := NewParser(KindVLLM, trace.Clock{})
		for j, l := range lines {
			p.Feed(time.Duration(j)*time.Millisecond, l)
		}
		p.Flush(time.Duration(len(lines)) * time.Millisecond)
		n += len(lines)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "lines/s")
}

// FuzzUnwrap: stripping collectors' prefixes never panics, keeps a suffix
// of the line, and a stamp it reports is a time.
func FuzzUnwrap(f *testing.F) {
	for _, s := range []string{"vllm-1  | x", "2025-05-09T20:51:11.123456789Z x", "[pod/a/b] x", "May  9 22:51:11 h u[1]: x",
		"2025-05-09T22:51:11+0000 h u[1]: x", "[pod/a/b] 2025-05-09T20:51:11Z s-1 | May  9 22:51:11 h u[1]: x", "a | b", "Feb 29 00:00:00 h u: x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		u := Unwrap(line, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
		if !strings.HasSuffix(line, u.Line) {
			t.Fatalf("%q is not a suffix of %q", u.Line, line)
		}
		if u.HasAt == u.At.IsZero() {
			t.Fatalf("HasAt %v with %v", u.HasAt, u.At)
		}
		if u.Wrapper == "" && u.Line != line {
			t.Fatalf("stripped %q without naming a wrapper", line)
		}
	})
}

// FuzzStageLine: the hand reading of a stage line agrees with the JSON
// decoder whenever it reads one.
func FuzzStageLine(f *testing.F) {
	for _, s := range []string{
		`{"treni_stage":"v1","stage":"kv_alloc","start_ns":5,"end_ns":9,"pid":12,"attrs":{"blocks":3,"mode":"staged","ok":true}}`,
		`{"treni_stage":"v1","stage":"cuda_init","start_ns":-9223372036854775808,"end_ns":9223372036854775807}`,
		`{"treni_stage":"v1","stage":"warmup","start_ns":1,"end_ns":2,"attrs":{}}`,
		`{"treni_stage":"v1","stage":"warmup","start_ns":1,"end_ns":2,"attrs":{"a":1e400}}`,
		`{"treni_stage":"v1","stage":"warmup","start_ns":1,"end_ns":2,"attrs":{"a":"x,y"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var in interner
		fast, ok := fastStageLine(line, &in)
		if !ok {
			return
		}
		slow, err := trace.ParseStageLine(line)
		if err != nil {
			t.Fatalf("read by hand, refused by the decoder (%v): %q", err, line)
		}
		if fmt.Sprint(fast) != fmt.Sprint(slow) {
			t.Fatalf("read differently:\n hand %+v\n json %+v", fast, slow)
		}
	})
}

// FuzzRFC3339Prefix: the hand-read stamp at the start of a line is what
// the regexp matches there.
func FuzzRFC3339Prefix(f *testing.F) {
	for _, s := range []string{"2024-01-15T08:47:15.882960Z  INFO x", "2024-01-15T08:47:15+05:30 x", "2024-01-15T08:47:15.Z", "2024-01-15T08:47:15.5", "2024-01-15T08:47:15-0", "x 2024-01-15T08:47:15Z", "2024-01-15T08:47:15Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := rfc3339Prefix(s)
		loc := reRFC3339.FindStringIndex(s)
		atStart := loc != nil && loc[0] == 0
		if n > 0 != atStart || atStart && loc[1] != n {
			t.Fatalf("%q: hand-read %d, regexp %v", s, n, loc)
		}
	})
}

// FuzzStampCache: reusing the last stamp's reading places any lines as
// reading every stamp does (a stamp between two equal ones, a jump of a
// year, a zone that changes).
func FuzzStampCache(f *testing.F) {
	f.Add(uint8(0), "INFO 12-31 23:59:59 [a.py:1] x", "2026-05-19 02:11:47,969 - INFO - y", int64(0))
	f.Add(uint8(0), "INFO 01-01 00:00:01 [a.py:1] x", "INFO:     127.0.0.1:1 - \"POST / HTTP/1.1\" 200 OK", int64(86400*200))
	f.Add(uint8(1), "[2025-01-23 19:34:55 TP0] x", "(x pid=1) [2025-01-23 19:34:56 TP0] y", int64(0))
	f.Add(uint8(4), "[GIN] 2026/05/05 - 01:30:24 | 200 | 1s | ::1 | POST \"/api/chat\"", "time=2026-05-05T01:30:24.403+05:30 level=INFO msg=x", int64(3600))
	f.Fuzz(func(t *testing.T, k uint8, a, b string, refSec int64) {
		kind := fuzzKinds[int(k)%len(fuzzKinds)]
		if kind == KindAuto || kind == KindUnknown || strings.ContainsAny(a+b, "\n") {
			return
		}
		ref := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(refSec%(400*86400)) * time.Second)
		if with, without := placeCompare(kind, ref, []string{a, b, a, a, b, b, a}); with != without {
			t.Fatalf("the stamp cache changed the offsets:\n with    %s\n without %s", with, without)
		}
	})
}
