package sessions

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// ChromeEvent is one entry of a Chrome trace's traceEvents array, the JSON
// format Perfetto and chrome://tracing open. Times are microseconds.
type ChromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	ID   string         `json:"id,omitempty"`
	S    string         `json:"s,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// ChromeTrace is the top-level object of a Chrome trace file.
type ChromeTrace struct {
	TraceEvents     []ChromeEvent     `json:"traceEvents"`
	DisplayTimeUnit string            `json:"displayTimeUnit"`
	Metadata        map[string]string `json:"metadata,omitempty"`
}

// Thread ids inside each run's process: one track per stage (so that
// overlapping stages never have to nest), then fixed tracks.
const (
	tidMarkers  = 1000
	tidLog      = 1001
	tidRequests = 1002
)

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// ExportChrome converts a session to a Chrome trace: each run is a process,
// stages are complete slices ("X") on one thread per stage, samples are
// counters ("C"), requests are async slices ("b"/"e") with an async instant
// ("n") per token and a nested "ttft" slice, logs and markers are instants.
func ExportChrome(s *Session) ([]byte, error) {
	ct := ChromeTrace{DisplayTimeUnit: "ms", Metadata: map[string]string{
		"tool": "treni-top " + s.Header.ToolVersion, "target": s.Header.Target.Describe(),
	}}
	add := func(e ChromeEvent) { ct.TraceEvents = append(ct.TraceEvents, e) }
	named := map[[2]int]bool{}
	thread := func(pid, tid int, name string) {
		if named[[2]int{pid, tid}] {
			return
		}
		named[[2]int{pid, tid}] = true
		add(ChromeEvent{Name: "thread_name", Ph: "M", PID: pid, TID: tid, Args: map[string]any{"name": name}})
		add(ChromeEvent{Name: "thread_sort_index", Ph: "M", PID: pid, TID: tid, Args: map[string]any{"sort_index": tid}})
	}
	runs := s.Runs()
	for _, run := range runs {
		pid := run.Index + 1
		add(ChromeEvent{Name: "process_name", Ph: "M", PID: pid, Args: map[string]any{"name": fmt.Sprintf("run %d: %s", run.Index, s.Header.Target.Describe())}})
		for _, sp := range run.Spans {
			tid := sp.Name.Order() + 1
			thread(pid, tid, string(sp.Name))
			dur := us(sp.Duration())
			args := map[string]any{"source": sp.Source}
			for k, v := range sp.Attrs {
				args[k] = v
			}
			if sp.Workers > 1 {
				args["workers"] = sp.Workers
			}
			if sp.Open {
				args["open"] = true
			}
			add(ChromeEvent{Name: string(sp.Name), Cat: "stage", Ph: "X", TS: us(sp.Start), Dur: &dur, PID: pid, TID: tid, Args: args})
		}
		for _, g := range run.Attribution.Gaps {
			tid := len(trace.Stages()) + 1
			thread(pid, tid, string(trace.StageUnattributed))
			dur := us(g.Duration())
			add(ChromeEvent{Name: string(trace.StageUnattributed), Cat: "stage", Ph: "X", TS: us(g.Start), Dur: &dur, PID: pid, TID: tid})
		}
		for _, q := range run.Requests {
			thread(pid, tidRequests, "requests")
			id := fmt.Sprintf("r%d-%s", run.Index, q.ID)
			name := q.Label
			if name == "" {
				name = q.ID
			}
			args := map[string]any{"phase": string(q.Phase), "ttft_ms": stat.MS(q.TTFT()), "e2e_ms": stat.MS(q.E2E()), "tokens": q.OutputTokens()}
			if q.Error != "" {
				args["error"] = q.Error
			}
			add(ChromeEvent{Name: name, Cat: "request", Ph: "b", TS: us(q.Sent), PID: pid, TID: tidRequests, ID: id, Args: args})
			if q.FirstToken > 0 {
				add(ChromeEvent{Name: "ttft", Cat: "request", Ph: "b", TS: us(q.Sent), PID: pid, TID: tidRequests, ID: id})
				add(ChromeEvent{Name: "ttft", Cat: "request", Ph: "e", TS: us(q.Sent + q.FirstToken), PID: pid, TID: tidRequests, ID: id})
			}
			for i, t := range q.Tokens {
				add(ChromeEvent{Name: "token", Cat: "request", Ph: "n", TS: us(q.Sent + t), PID: pid, TID: tidRequests, ID: id, Args: map[string]any{"i": i}})
			}
			end := q.End
			if end < q.FirstToken {
				end = q.FirstToken
			}
			add(ChromeEvent{Name: name, Cat: "request", Ph: "e", TS: us(q.Sent + end), PID: pid, TID: tidRequests, ID: id})
		}
	}
	pidOf := func(run int) int { return run + 1 }
	for _, e := range s.Events {
		pid := pidOf(e.Run)
		switch e.Kind {
		case trace.KindSample:
			keys := make([]string, 0, len(e.Sample.Values))
			for k := range e.Sample.Values {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			// One counter track per metric, named source.metric, so that
			// units never share an axis.
			for _, k := range keys {
				args := map[string]any{"value": e.Sample.Values[k]}
				add(ChromeEvent{Name: e.Sample.Source + "." + k, Cat: "sample", Ph: "C", TS: us(e.At), PID: pid, Args: args})
			}
		case trace.KindMarker:
			thread(pid, tidMarkers, "markers")
			args := map[string]any{}
			for k, v := range e.Marker.Attrs {
				args[k] = v
			}
			add(ChromeEvent{Name: e.Marker.Name, Cat: "marker", Ph: "i", S: "p", TS: us(e.At), PID: pid, TID: tidMarkers, Args: args})
		case trace.KindProcess:
			thread(pid, tidMarkers, "markers")
			args := map[string]any{"pid": e.Process.PID}
			if e.Process.Action == trace.ProcessExit {
				args["exit_code"] = e.Process.ExitCode
				args["expected"] = e.Process.Expected
			}
			add(ChromeEvent{Name: "process " + e.Process.Action, Cat: "process", Ph: "i", S: "p", TS: us(e.At), PID: pid, TID: tidMarkers, Args: args})
		case trace.KindLog:
			thread(pid, tidLog, "log")
			args := map[string]any{"text": e.Log.Text, "stream": e.Log.Stream}
			if e.Log.Stage != "" {
				args["stage"] = string(e.Log.Stage)
			}
			add(ChromeEvent{Name: "log", Cat: "log", Ph: "i", S: "t", TS: us(e.At), PID: pid, TID: tidLog, Args: args})
		}
	}
	b, err := json.Marshal(ct)
	if err != nil {
		return nil, fmt.Errorf("encode chrome trace: %w", err)
	}
	return b, nil
}
