package launch

import (
	"sync"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// runSink records the events a process emits.
type runSink struct {
	mu  sync.Mutex
	evs []trace.Event
}

func (s *runSink) Emit(e trace.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, e)
}

// TestSetRun: after SetRun a process's events carry the new run, except a
// stage span that started before the switch (a sleep's stage line read
// after the wake's run began), which stays with the run it started in.
func TestSetRun(t *testing.T) {
	var s runSink
	clock := trace.ClockAt(time.Now().Add(-time.Hour))
	p := newProcess(Spec{}, &s, clock, 2)
	before := clock.Now()
	time.Sleep(time.Millisecond)
	p.SetRun(3)
	if p.Run() != 3 {
		t.Fatalf("Run() = %d after SetRun(3)", p.Run())
	}
	after := clock.Now()
	p.emit(trace.Event{At: after, Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StageSleep, Start: before - time.Millisecond, End: before}})
	p.emit(trace.Event{At: after, Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StageWeightsRestore, Start: after, End: after + time.Millisecond}})
	p.emit(trace.Event{At: after, Kind: trace.KindLog, Log: &trace.Log{Text: "woke"}})
	p.emit(trace.Event{At: before, Kind: trace.KindLog, Log: &trace.Log{Text: "before the wake"}})
	want := []int{2, 3, 3, 2}
	for i, e := range s.evs {
		if e.Run != want[i] {
			t.Errorf("event %d (%v) carries run %d, want %d", i, e.Kind, e.Run, want[i])
		}
	}
}
