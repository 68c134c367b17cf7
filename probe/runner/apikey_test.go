package runner

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/probe/prober"
	"github.com/treni-top/treni-top/probe/scrape"
	"github.com/treni-top/treni-top/trace"
)

// keyedServer is an OpenAI server that wants "Bearer sk-t" on every path,
// as vLLM --api-key does on /v1 and a proxy in front of a server on all.
func keyedServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-t" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"message":"invalid api key"}}`)
			return
		}
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"data":[{"id":"synth-model"}]}`)
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n")
		case "/metrics":
			fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestHTTPProberAPIKey: the key goes with the model lookup and the
// request; without it the error names the flag, not --request-model.
func TestHTTPProberAPIKey(t *testing.T) {
	srv := keyedServer(t)
	target := &urlTarget{url: srv.URL, kind: "vllm"}
	probe := Probe{Label: "cold_1", Phase: trace.PhaseCold}

	h := &HTTPProber{Sink: &sink{}, Clock: trace.NewClock(), Prompt: "hi", MaxTokens: 1, Header: prober.BearerHeader("sk-t")}
	if q, err := h.Probe(context.Background(), target, probe); err != nil || len(q.Tokens) != 1 {
		t.Fatalf("with the key: %v (%d tokens)", err, len(q.Tokens))
	}

	h = &HTTPProber{Sink: &sink{}, Clock: trace.NewClock(), Prompt: "hi", MaxTokens: 1}
	_, err := h.Probe(context.Background(), target, probe)
	if err == nil || !strings.Contains(err.Error(), "HTTP 401 (the server wants an API key: pass --api-key KEY or set OPENAI_API_KEY)") || strings.Contains(err.Error(), "--request-model") {
		t.Errorf("model lookup without the key: %v", err)
	}

	// The model named: the request itself is refused, and says why.
	h = &HTTPProber{Sink: &sink{}, Clock: trace.NewClock(), Prompt: "hi", MaxTokens: 1, Model: "synth-model", Header: prober.BearerHeader("sk-wrong")}
	q, err := h.Probe(context.Background(), target, probe)
	if err == nil || q.Status != http.StatusUnauthorized || !strings.Contains(q.Error, "the server refused the API key given: check --api-key or OPENAI_API_KEY") {
		t.Errorf("request with a wrong key: %v (recorded error %q)", err, q.Error)
	}
}

// TestRunnerScrapeSendsKey: the /metrics scrape carries the key too; a
// page refused for want of one says which flag gives it.
func TestRunnerScrapeSendsKey(t *testing.T) {
	srv := keyedServer(t)
	for _, key := range []string{"sk-t", ""} {
		s := &sink{}
		r, err := New(Config{
			Sink:  s,
			Clock: trace.NewClock(),
			Launcher: LaunchFunc(func(_ context.Context, run int) (Target, error) {
				return servedTarget{&fakeTarget{run: run, exited: make(chan struct{})}, srv.URL}, nil
			}),
			ExitAfterSequence: true,
			ServerMetrics:     true,
			Header:            prober.BearerHeader(key),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		m := s.markers(scrape.MarkerServerMetrics)
		if len(m) != 1 {
			t.Fatalf("key %q: %d server_metrics markers", key, len(m))
		}
		reason, _ := m[0].Marker.Attrs.String("reason")
		switch {
		case key != "" && m[0].Marker.Attrs["enabled"] != true:
			t.Errorf("with the key: %v", m[0].Marker.Attrs)
		case key == "" && (m[0].Marker.Attrs["enabled"] != false || !strings.Contains(reason, "pass --api-key")):
			t.Errorf("without the key: %v", m[0].Marker.Attrs)
		}
	}
}
