package tui

import (
	"fmt"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// statusFromMarkers puts on the status line what the session's markers
// say the user must know now: why the target is not healthy yet (cleared
// once it is) and a cold run that failed (a port already taken, a server
// that wants an API key), in the words of the headless transcript.
func (m *Model) statusFromMarkers(evs []trace.Event) {
	for _, e := range evs {
		if e.Kind != trace.KindMarker || e.Marker == nil {
			continue
		}
		switch e.Marker.Name {
		case trace.MarkerHealthWait:
			m.status = sessions.HealthWaitText(e.Marker)
			m.waitStatus = m.status
		case trace.MarkerHealthy:
			if m.waitStatus != "" && m.status == m.waitStatus {
				m.status = ""
			}
			m.waitStatus = ""
		case trace.MarkerRunFailed:
			msg, _ := e.Marker.Attrs.String("error")
			m.status = fmt.Sprintf("run %d failed: %s", e.Run, msg)
		}
	}
}
