package scrape_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/engine/model/synth"
	"github.com/treni-top/treni-top/engine/serve"
	"github.com/treni-top/treni-top/probe/scrape"
	"github.com/treni-top/treni-top/trace"
)

// TestLiveBuiltInEngine scrapes the built-in engine's server, run in
// process on the tiny synth model: after one chat request the server's
// TTFT for that request, its running requests and its KV usage arrive on
// the event stream as samples of source "server".
func TestLiveBuiltInEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the engine")
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(context.Background(), synth.Options{Arch: "qwen3", Preset: synth.PresetTiny, OutDir: dir, Seed: 5, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, serve.Options{ModelDir: dir, Addr: "127.0.0.1:0", KVBlocks: 64, KVTouchGiB: 0.01, WarmupPasses: 1,
			TokenizerCacheDir: "-", Stderr: io.Discard, APIKey: "k", Ready: func(a string) { ready <- a }})
	}()
	var base string
	select {
	case a := <-ready:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("engine ended before ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("engine not ready")
	}

	s, err := scrape.Probe(ctx, nil, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Family() != scrape.FamilyTreni {
		t.Fatalf("family %q", s.Family())
	}
	events := make(chan trace.Event, 1024)
	sink := trace.SinkFunc(func(e trace.Event) {
		select {
		case events <- e:
		default:
		}
	})
	sctx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(sctx, sink, trace.NewClock(), 0, 5*time.Millisecond) }()

	// The same long prompt twice: the second finds its full KV blocks in
	// the engine's prefix cache, so the page's hit counters move.
	prompt := strings.Repeat("the first request to a cold server is slow ", 12)
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions",
			strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"`+prompt+`"}],"max_tokens":4}`))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("chat: %s", resp.Status)
		}
	}

	seen := map[string]bool{}
	var ttft, count, hitRatio float64
	deadline := time.After(time.Minute)
	// Both requests have finished, but their first tokens may fall in
	// different scrape intervals: read until both are counted.
	for !(seen[trace.MetricServerTTFTMean] && seen[trace.MetricServerRunning] && seen[trace.MetricServerKVUsage] && hitRatio > 0 && count >= 2) {
		select {
		case e := <-events:
			if e.Kind != trace.KindSample || e.Sample.Source != trace.SourceServer {
				continue
			}
			for k, v := range e.Sample.Values {
				seen[k] = true
				switch k {
				case trace.MetricServerTTFTMean:
					ttft = v
				case trace.MetricServerTTFTCount:
					count += v
				case trace.MetricServerPrefixHitRate:
					if v < 0 || v > 1 {
						t.Errorf("prefix hit ratio %v outside 0–1", v)
					}
					hitRatio = max(hitRatio, v)
				case trace.MetricServerKVUsage:
					if v < 0 || v > 1 {
						t.Errorf("kv usage %v outside 0–1", v)
					}
				}
			}
		case <-deadline:
			t.Fatalf("no server TTFT/running/KV/prefix-hit samples for both requests within a minute; saw %v, hit ratio %v, first tokens %v", seen, hitRatio, count)
		}
	}
	stop()
	<-runDone
	if ttft <= 0 || count != 2 {
		t.Errorf("server TTFT %v over %v requests, want two requests with a positive TTFT", ttft, count)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("engine: %v", err)
	}
}
