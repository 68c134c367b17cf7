package runner

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

type urlTarget struct {
	fakeTarget
	url, kind string
}

func (u *urlTarget) BaseURL() string { return u.url }
func (u *urlTarget) Kind() string    { return u.kind }

func TestHTTPProberOpenAI(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"data":[{"id":"synth-model"}]}`)
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			f := w.(http.Flusher)
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n")
			f.Flush()
			for _, tok := range []string{"a", "b", "c"} {
				time.Sleep(5 * time.Millisecond)
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", tok)
				f.Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	s := &sink{}
	h := &HTTPProber{Sink: s, Clock: trace.NewClock(), Prompt: "hi", MaxTokens: 3}
	q, err := h.Probe(context.Background(), &urlTarget{url: srv.URL, kind: "vllm"}, Probe{Run: 2, Label: "cold_1", Phase: trace.PhaseCold})
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Tokens) != 3 || q.FirstToken <= 0 || q.ID != "run2-cold_1" {
		t.Errorf("request %+v", q)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var done int
	for _, e := range s.evs {
		if e.Kind == trace.KindRequest && e.Request.Done {
			done++
			if e.Run != 2 {
				t.Errorf("request event run %d", e.Run)
			}
		}
	}
	if done != 1 {
		t.Errorf("%d done request events", done)
	}
}

func TestHTTPProberOllamaTimings(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/tags":
			fmt.Fprint(w, `{"models":[{"name":"synth:latest"}]}`)
		case "/api/generate":
			fmt.Fprintln(w, `{"model":"synth:latest","response":"x","done":false}`)
			fmt.Fprintln(w, `{"model":"synth:latest","response":"","done":true,"load_duration":1500000000,"prompt_eval_duration":20000000,"eval_duration":5000000,"total_duration":1600000000,"eval_count":1,"prompt_eval_count":7}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	s := &sink{}
	h := &HTTPProber{Sink: s, Clock: trace.NewClock(), Prompt: "hi", MaxTokens: 1}
	if _, err := h.Probe(context.Background(), &urlTarget{url: srv.URL, kind: "ollama"}, Probe{Label: "cold_1", Phase: trace.PhaseCold}); err != nil {
		t.Fatal(err)
	}
	ms := s.markers(trace.MarkerServerTimings)
	if len(ms) != 1 {
		t.Fatalf("%d server timing markers", len(ms))
	}
	if v, _ := ms[0].Marker.Attrs.Float("load_ms"); v != 1500 {
		t.Errorf("load_ms %v", v)
	}
	if m, _ := ms[0].Marker.Attrs.String("request"); !strings.HasSuffix(m, "cold_1") {
		t.Errorf("request %q", m)
	}
}
