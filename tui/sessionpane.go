package tui

import (
	"fmt"

	"github.com/treni-top/treni-top/trace/stat"
)

// sessionPane (the "Session" pane) lists the session's file, its cold
// runs and the facts of the header.
type sessionPane struct{}

func (sessionPane) title() string { return "Session" }

func (sessionPane) view(c *programContext, st *state, w, h int) []string {
	t := c.theme
	hd := c.header
	var lines []string
	lines = append(lines, fileLine(t, c.keys.mode, c.file, w))
	host := hd.Host.Hostname
	if host == "" {
		host = "?"
	}
	lines = append(lines, fmt.Sprintf("host %s · %s/%s · %d CPUs", host, hd.Host.OS, hd.Host.Arch, hd.Host.CPUs))
	for _, g := range hd.GPUs {
		lines = append(lines, fmt.Sprintf("gpu%d %s %s", g.Index, g.Name, stat.FormatBytes(float64(g.MemBytes))))
	}
	var wb int64
	for _, f := range hd.ModelFiles {
		wb += f.Bytes
	}
	if len(hd.ModelFiles) > 0 {
		lines = append(lines, fmt.Sprintf("weights %d file(s), %s", len(hd.ModelFiles), stat.FormatBytes(float64(wb))))
	}
	lines = append(lines, "")
	if len(st.runs) == 0 {
		return append(lines, t.render(t.dim, "no runs yet"))
	}
	hdr := padRight("run", 5) + padLeft("cold", 10) + padLeft("healthy", 10) + padLeft("reqs", 6) + "  " + padRight("top stage", 22) + " exit"
	lines = append(lines, t.render(t.bold, hdr))
	sel, _ := st.run(c.runSel)
	for _, r := range st.runs {
		healthy := "—"
		if r.Healthy > 0 {
			healthy = stat.FormatDuration(r.Healthy - r.Start)
		}
		exit := "running"
		if r.Exit != nil {
			exit = targetState(r, true, false)
		}
		mark := "  "
		if r.Index == sel.Index {
			mark = "▶ "
		}
		lines = append(lines, padRight(mark+itoa(r.Index+1), 5)+padLeft(stat.FormatDuration(r.ColdTotal()), 10)+padLeft(healthy, 10)+
			padLeft(itoa(len(r.Requests)), 6)+"  "+padRight(string(r.Attribution.Dominant), 22)+" "+exit)
	}
	if len(st.runs) > 1 {
		lines = append(lines, t.render(t.dim, "[ and ] choose the run the other panes show"))
	}
	return lines
}

// fileLine says where the session is kept: the file being recorded or
// replayed, its directory cut from the left when the line is short so the
// file's name stays.
func fileLine(t *theme, md mode, file string, w int) string {
	verb := "file"
	switch md {
	case modeReplay:
		verb = "replaying"
	case modeLive, modeAttach, modeBench:
		verb = "recording"
		if file == "" {
			return t.render(t.dim, "not recorded (--no-record)")
		}
	}
	if file == "" {
		return t.render(t.dim, "no session file")
	}
	if room := w - widthOf(verb) - 1; widthOf(file) > room && room > 1 {
		r := []rune(file)
		file = "…" + string(r[len(r)-(room-1):])
	}
	return verb + " " + file
}
