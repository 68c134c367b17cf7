package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/engine/model/synth"
	"github.com/treni-top/treni-top/trace"
)

// TestBinaryStageCoverage builds treni-top, serves a tiny synth checkpoint
// and checks that its stage lines cover at least 98% of process start →
// HTTP ready, then that it serves a request and exits cleanly on SIGTERM.
func TestBinaryStageCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if runtime.GOOS != "linux" {
		t.Skip("process_start needs /proc")
	}
	bin := buildBinary(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "tiny")
	if _, err := synth.Write(context.Background(), synth.Options{Arch: "qwen3", Preset: synth.PresetTiny, OutDir: dir, Seed: 3, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, bin, []string{"XDG_CACHE_HOME=" + filepath.Join(tmp, "cache")},
		"--model", dir, "--addr", "127.0.0.1:0", "--warmup-passes", "1", "--kv-blocks", "256")

	byName := map[trace.Stage]trace.StageLine{}
	for _, l := range s.stages {
		if l.PID != s.cmd.Process.Pid {
			t.Errorf("stage %s reports pid %d, want %d", l.Stage, l.PID, s.cmd.Process.Pid)
		}
		byName[l.Stage] = l
	}
	for _, st := range []trace.Stage{trace.StageProcessStart, trace.StageRuntimeInit, trace.StageTensorIndexBuild, trace.StagePageCache,
		trace.StageTokenizerLoad, trace.StageKVAlloc, trace.StageWarmup, trace.StageHTTPReady} {
		if _, ok := byName[st]; !ok {
			t.Errorf("no %s stage line:\n%s", st, s.log.String())
		}
	}
	if t.Failed() {
		return
	}
	clock := trace.ClockAt(time.Unix(0, byName[trace.StageProcessStart].StartNS))
	var spans []trace.Span
	for _, l := range s.stages {
		spans = append(spans, l.Span(clock))
	}
	window := trace.Interval{Start: 0, End: clock.At(time.Unix(0, byName[trace.StageHTTPReady].EndNS))}
	a := trace.Attribute(spans, window)
	t.Logf("process start → HTTP ready %v, unattributed %v (%.2f%%), dominant %s", a.Total, a.Unattributed, 100*a.UnattributedShare(), a.Dominant)
	for _, st := range a.Stages {
		t.Logf("  %-20s %10v  %v", st.Name, st.Duration, st.Attrs)
	}
	if a.UnattributedShare() > 0.02 {
		t.Fatalf("stages leave %.2f%% of the cold start unattributed (gaps %v); want ≤ 2%%", 100*a.UnattributedShare(), a.Gaps)
	}
	// The checkpoint and the tokenizer load side by side.
	if tl, ix := byName[trace.StageTokenizerLoad], byName[trace.StageTensorIndexBuild]; tl.StartNS > ix.EndNS {
		t.Errorf("tokenizer_load starts after tensor_index_build ends: not parallel")
	}

	// It serves for real.
	resp, err := http.Post(s.base+"/v1/completions", "application/json", strings.NewReader(`{"model":"tiny","prompt":"hello","max_tokens":4,"temperature":0}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil || out.Usage.CompletionTokens != 4 {
		t.Fatalf("completion: %d %s", resp.StatusCode, b)
	}
	s.stop(t)
}
