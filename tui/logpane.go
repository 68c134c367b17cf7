package tui

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// logView is the target's output: a scrollable list that follows the tail
// until the user scrolls up, with / search and stage lines marked. Lines
// longer than the pane wrap under their text (the time stamp column stays
// clear), so nothing a server printed is cut.
//
// It keeps its own scroll offset instead of bubbles' viewport: the viewport
// re-splits and re-measures its whole content on every SetContent, which
// for a 20,000-line live tail would cost tens of milliseconds per new line.
// Here lines are prepared once, as they arrive, and only the visible ones
// are wrapped and measured.
type logView struct {
	off    int // index of the first visible line
	height int // visible rows at the last render
	follow bool

	searching bool
	// input is the query being typed after /. A plain string rather than
	// bubbles' textinput, which would pull a clipboard dependency into the
	// module for one line of input.
	input   string
	query   string
	matches []int // line indexes that contain the query
	cur     int   // index into matches

	lines   []logEntry // st.logs[i] prepared, for i in [0, len(lines))
	dropped int        // st.logDropped the lines were built against
	resets  int        // st.resets the lines were built against
	builtQ  string
}

// logEntry is one log line ready to draw: its styled prefix (time stamp
// and mark, logPrefixW cells) and its plain text, drawn dim (stderr) or
// with its leading stage tag ("[page_cache]", tag cells) marked.
type logEntry struct {
	prefix string
	text   string
	tag    int
	dim    bool
}

// logPrefixW is the width of "   1.234s ▸ ": continuation rows are
// indented by it.
const logPrefixW = 12

func newLogView() *logView { return &logView{follow: true, height: 10} }

func (logView) title() string { return "Log" }

// sync prepares the lines that arrived since the last call; a new query or
// lines dropped from the front of the buffer rebuild everything.
func (l *logView) sync(c *programContext, st *state, h int) {
	l.height = max(h, 1)
	if n := st.logDropped - l.dropped; l.builtQ == l.query && l.resets == st.resets && n > 0 && n <= len(l.lines) {
		// The state let its oldest n lines go: so do the prepared
		// lines, rather than preparing the kept ones again.
		l.lines = append(l.lines[:0], l.lines[n:]...)
		kept := l.matches[:0]
		for _, i := range l.matches {
			if i >= n {
				kept = append(kept, i-n)
			}
		}
		// The current match keeps its line, or goes to the first kept.
		l.cur = max(l.cur-(len(l.matches)-len(kept)), 0)
		l.matches, l.dropped = kept, st.logDropped
		l.off = max(l.off-n, 0) // the same lines stay in view
	}
	if l.builtQ != l.query || l.resets != st.resets || l.dropped != st.logDropped || len(l.lines) > len(st.logs) {
		l.lines, l.matches = l.lines[:0], l.matches[:0]
		l.builtQ, l.dropped, l.resets = l.query, st.logDropped, st.resets
	}
	t := c.theme
	q := strings.ToLower(l.query)
	for i := len(l.lines); i < len(st.logs); i++ {
		ln := st.logs[i]
		e := logEntry{text: ln.text, dim: ln.stream == "stderr" && ln.stage == ""}
		mark := "  "
		if ln.stage != "" {
			mark = t.render(t.stageMark, "▸ ")
			tag := "[" + string(ln.stage) + "]"
			e.text, e.tag = tag+" "+stageLineText(ln.text), len(tag)
		}
		stamp := fmt.Sprintf("%8.3fs", ln.at.Seconds())
		if q != "" && strings.Contains(strings.ToLower(ln.text), q) {
			l.matches = append(l.matches, i)
			// A match is marked by a glyph as well, so it shows under NO_COLOR.
			stamp, mark = t.render(t.match, stamp), t.render(t.match, "»")+" "
		}
		e.prefix = stamp + " " + mark
		l.lines = append(l.lines, e)
	}
	if l.follow {
		l.off = l.maxOff()
	}
	l.off = min(max(l.off, 0), l.maxOff())
}

// rows draws line i wrapped to width w: the prefix and the text's first
// part, then the rest indented under the text.
func (l *logView) rows(t *theme, i, w int) []string {
	e := l.lines[i]
	parts := []string{e.text}
	if bw := w - logPrefixW; bw >= 8 && widthOf(e.text) > bw {
		// Narrower than that, wrapping would not help: the frame cuts.
		parts = strings.Split(ansi.Wrap(e.text, bw, ""), "\n")
	}
	out := make([]string, len(parts))
	for k, p := range parts {
		switch {
		case k == 0 && e.tag > 0 && len(p) >= e.tag:
			p = t.render(t.stageMark, p[:e.tag]) + p[e.tag:]
		case e.dim:
			p = t.render(t.dim, p)
		}
		if k == 0 {
			out[k] = e.prefix + p
		} else {
			out[k] = strings.Repeat(" ", logPrefixW) + p
		}
	}
	return out
}

func (l *logView) maxOff() int { return max(len(l.lines)-l.height, 0) }

func (l *logView) view(c *programContext, st *state, w, h int) []string {
	t := c.theme
	if h < 2 {
		return nil
	}
	l.sync(c, st, h-1)
	if len(st.logs) == 0 {
		return []string{t.render(t.dim, "no output from the target yet")}
	}
	var out []string
	if l.follow || l.off >= l.maxOff() {
		// The tail: wrap lines from the last one up until the pane is full.
		for i := len(l.lines) - 1; i >= 0 && len(out) < l.height; i-- {
			out = append(l.rows(t, i, w), out...)
		}
		if len(out) > l.height {
			out = out[len(out)-l.height:]
		}
	} else {
		if l.off == 0 && st.logDropped > 0 {
			out = append(out, t.render(t.dim, fit(droppedNote(c, st.logDropped), w)))
		}
		for i := l.off; i < len(l.lines) && len(out) < l.height; i++ {
			out = append(out, l.rows(t, i, w)...)
		}
		out = out[:min(len(out), l.height)]
	}
	for len(out) < h-1 {
		out = append(out, "")
	}
	var status string
	switch {
	case l.searching:
		status = "/" + l.input + "█  enter search · esc cancel"
	case l.query != "":
		pos := 0
		if len(l.matches) > 0 {
			pos = l.cur + 1
		}
		in := ""
		if st.logDropped > 0 {
			in = fmt.Sprintf(" in the last %d lines", len(st.logs))
		}
		status = fmt.Sprintf("/%s  %d/%d matches%s · n/N next/previous · / new search", l.query, pos, len(l.matches), in)
	default:
		follow := "following the tail"
		if !l.follow {
			follow = "scrolled · G follows the tail"
		}
		kept := ""
		if st.logDropped > 0 {
			kept = fmt.Sprintf(" (%d earlier not kept)", st.logDropped)
		}
		status = fmt.Sprintf("%d lines%s · %s · / search", len(st.logs), kept, follow)
	}
	return append(out, t.render(t.dim, status))
}

// droppedNote is the first row of the log scrolled to its top when the
// oldest lines were let go: the pane keeps the last maxLogLines at most,
// and its search covers only those.
func droppedNote(c *programContext, n int) string {
	s := fmt.Sprintf("… %d earlier lines not kept here (search covers the lines below)", n)
	if c.file != "" {
		s += "; the session file has them all"
	}
	return s
}

// scroll moves by n lines (negative: up); reaching the bottom follows the
// tail again.
func (l *logView) scroll(n int) {
	l.off = min(max(l.off+n, 0), l.maxOff())
	l.follow = l.off >= l.maxOff()
}

// top and bottom jump to either end.
func (l *logView) top()    { l.off, l.follow = 0, false }
func (l *logView) bottom() { l.off, l.follow = l.maxOff(), true }

// jump moves to match i (wrapping) and centres it.
func (l *logView) jump(i int) {
	if len(l.matches) == 0 {
		return
	}
	i = ((i % len(l.matches)) + len(l.matches)) % len(l.matches)
	l.cur = i
	l.off = min(max(l.matches[i]-l.height/2, 0), l.maxOff())
	l.follow = false
}

// maxQuery bounds the search input.
const maxQuery = 200

// edit applies one key to the search input.
func (l *logView) edit(k tea.KeyMsg) {
	switch k.Type {
	case tea.KeyBackspace:
		if r := []rune(l.input); len(r) > 0 {
			l.input = string(r[:len(r)-1])
		}
	case tea.KeyRunes, tea.KeySpace:
		if len(l.input) < maxQuery {
			l.input += string(k.Runes)
		}
	}
}

// stageLineText shortens the built-in engine's JSON stage lines to what a
// person reads (duration and attributes); other servers' lines are shown
// as they were printed. Search still matches the raw line.
func stageLineText(text string) string {
	sl, err := trace.ParseStageLine(text)
	if err != nil {
		return text
	}
	out := stat.FormatDuration(time.Duration(sl.EndNS-sl.StartNS)) + " (treni stage line"
	keys := make([]string, 0, len(sl.Attrs))
	for k := range sl.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := fmt.Sprint(sl.Attrs[k])
		if f, ok := sl.Attrs.Float(k); ok {
			switch {
			case k == trace.AttrBytes:
				v = strings.ReplaceAll(stat.FormatBytes(f), " ", "")
			case f == float64(int64(f)):
				v = fmt.Sprintf("%d", int64(f))
			default:
				v = fmt.Sprintf("%.3g", f)
			}
		}
		out += " " + k + "=" + v
	}
	return out + ")"
}

// capturing is true while a search is being typed: every key but quit
// edits it.
func (l *logView) capturing() bool { return l.searching }

// startSearch opens the search prompt (the root's "/" key, from any pane).
func (l *logView) startSearch() {
	l.searching = true
	l.input = ""
}

// onKey handles the log's own keys: the search prompt while typing, then
// next/previous match and scrolling while focused.
func (l *logView) onKey(c *programContext, st *state, msg tea.KeyMsg) bool {
	if l.searching {
		switch msg.Type {
		case tea.KeyEnter:
			l.searching = false
			l.query = l.input
			l.sync(c, st, l.height)
			l.jump(0)
		case tea.KeyEsc:
			l.searching = false
		case tea.KeyCtrlC:
			return false // quit
		default:
			l.edit(msg)
		}
		return true
	}
	k := c.keys
	switch {
	case key.Matches(msg, k.NextMatch):
		l.jump(l.cur + 1)
	case key.Matches(msg, k.PrevMatch):
		l.jump(l.cur - 1)
	case key.Matches(msg, k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom):
		l.sync(c, st, l.height) // scroll over what is there now
		switch {
		case key.Matches(msg, k.Up):
			l.scroll(-1)
		case key.Matches(msg, k.Down):
			l.scroll(1)
		case key.Matches(msg, k.PageUp):
			l.scroll(-l.height)
		case key.Matches(msg, k.PageDown):
			l.scroll(l.height)
		case key.Matches(msg, k.Top):
			l.top()
		case key.Matches(msg, k.Bottom):
			l.bottom()
		}
	default:
		return false
	}
	return true
}
