package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/trace"
)

// sleepyBackend is fakeBackend with sleep mode: its steps wait at gate
// until the test opens it, and refuse to run while it sleeps.
type sleepyBackend struct {
	fakeBackend
	gate chan struct{}

	mu     sync.Mutex
	asleep bool
	sleeps int
}

func (b *sleepyBackend) Forward(ctx context.Context, bt *sched.Batch, logits [][]float32) error {
	select {
	case <-b.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.mu.Lock()
	asleep := b.asleep
	b.mu.Unlock()
	if asleep {
		return errors.New("a step while asleep")
	}
	return b.fakeBackend.Forward(ctx, bt, logits)
}

func (b *sleepyBackend) Sleep(_ context.Context, level int) ([]sched.Phase, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asleep = true
	b.sleeps++
	return []sched.Phase{{Stage: trace.StageSleep, Start: time.Now(), End: time.Now(), Attrs: trace.Attrs{"level": level}}}, nil
}

func (b *sleepyBackend) Wake(context.Context, bool, bool) ([]sched.Phase, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asleep = false
	return nil, nil
}

func (b *sleepyBackend) Asleep() (bool, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.asleep, b.asleep
}

// sleepyEnv serves be with sleep mode on.
func sleepyEnv(t *testing.T, be *sleepyBackend) (*Server, string) {
	t.Helper()
	tok := testTokenizer(t)
	be.vocab, be.blocks = tok.VocabSize(), 2048
	s, err := sched.New(be, sched.Config{MaxSeqLen: ctxLen, MaxBatch: 16, MaxBatchedTokens: 128})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	srv, err := New(s, tok, Options{ModelID: modelID, Sleep: &SleepOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		cancel()
		<-done
	})
	return srv, hs.URL
}

// streamed sends a streamed completion and returns its text, the code of
// an error event if one came, and whether [DONE] ended it.
func streamed(t *testing.T, url string, maxTokens int) (text, errCode string, doneSeen bool) {
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+modelID+`","prompt":"hello","max_tokens":`+strconv.Itoa(maxTokens)+`,"temperature":0,"stream":true}`))
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			doneSeen = true
			continue
		}
		var ev struct {
			Choices []struct{ Text string } `json:"choices"`
			Error   *struct{ Code string }  `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Error(err)
			return
		}
		if ev.Error != nil {
			errCode = ev.Error.Code
		}
		for _, c := range ev.Choices {
			text += c.Text
		}
	}
	return text, errCode, doneSeen
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func postEmpty(t *testing.T, url string) int {
	resp, err := http.Post(url, "application/json", nil)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSleepWhileRequestsRun: a sleep that arrives while a request runs
// closes the door at once (a new request gets 503) and then, in mode
// abort, ends the running request with an "aborted_by_sleep" error event,
// or, in mode wait, lets it finish before the backend sleeps. No step runs
// on a sleeping backend either way.
func TestSleepWhileRequestsRun(t *testing.T) {
	for _, mode := range []string{"abort", "wait"} {
		t.Run(mode, func(t *testing.T) {
			be := &sleepyBackend{gate: make(chan struct{})}
			srv, url := sleepyEnv(t, be)
			type result struct {
				text, code string
				done       bool
			}
			res := make(chan result, 1)
			go func() {
				text, code, done := streamed(t, url, 5)
				res <- result{text, code, done}
			}()
			waitFor(t, "the request to run", func() bool { return srv.s.Metrics().Running == 1 })
			slept := make(chan int, 1)
			go func() { slept <- postEmpty(t, url+"/sleep?level=1&mode="+mode) }()
			waitFor(t, "the sleep to close the door", func() bool {
				srv.sl.mu.RLock()
				defer srv.sl.mu.RUnlock()
				return srv.sl.gated
			})
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"`+modelID+`","prompt":"hi","max_tokens":2}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("a request during the sleep: %d (Retry-After %q), want 503", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			close(be.gate)
			if code := <-slept; code != 200 {
				t.Fatalf("POST /sleep: %d", code)
			}
			r := <-res
			switch mode {
			case "abort":
				if r.code != "aborted_by_sleep" || r.done {
					t.Fatalf("the running request in mode abort: %+v, want an aborted_by_sleep error event", r)
				}
			case "wait":
				if r.code != "" || !r.done || len(r.text) == 0 {
					t.Fatalf("the running request in mode wait: %+v, want it finished", r)
				}
			}
			if m := srv.s.Metrics(); m.Running+m.Waiting != 0 || srv.s.KV().Used() != 0 || be.sleeps != 1 {
				t.Fatalf("after the sleep: %d running, %d waiting, %d blocks used, %d sleeps", m.Running, m.Waiting, srv.s.KV().Used(), be.sleeps)
			}
			if code := postEmpty(t, url+"/wake_up"); code != 200 {
				t.Fatalf("POST /wake_up: %d", code)
			}
			if text, code, done := streamed(t, url, 3); code != "" || !done || text == "" {
				t.Fatalf("a request after the wake: %q %q %v", text, code, done)
			}
		})
	}
}
