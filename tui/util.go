package tui

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/charmbracelet/x/ansi"
)

func itoa(i int) string { return strconv.Itoa(i) }

// fit makes line exactly w cells wide: truncated with … or padded with
// spaces. Every line a pane returns goes through it, so no pane can break
// the layout.
func fit(line string, w int) string {
	if w <= 0 {
		return ""
	}
	lw := ansi.StringWidth(line)
	if lw > w {
		line = ansi.Truncate(line, w, "…")
		lw = ansi.StringWidth(line)
	}
	if lw < w {
		line += strings.Repeat(" ", w-lw)
	}
	return line
}

// fitLines makes exactly h lines of width w.
func fitLines(lines []string, w, h int) []string {
	out := make([]string, h)
	for i := 0; i < h; i++ {
		if i < len(lines) {
			out[i] = fit(lines[i], w)
		} else {
			out[i] = strings.Repeat(" ", max(w, 0))
		}
	}
	return out
}

// box frames lines with a titled border, w×h including the border. The
// focused pane gets a double border so focus shows without color.
func box(t *theme, title string, lines []string, w, h int, focused bool) []string {
	if w < 4 || h < 2 {
		return fitLines(nil, max(w, 0), max(h, 0))
	}
	tl, tr, bl, br, hz, vt := "╭", "╮", "╰", "╯", "─", "│"
	st := t.border
	if focused {
		tl, tr, bl, br, hz, vt = "╔", "╗", "╚", "╝", "═", "║"
		st = t.borderFocus
	}
	head := hz + " " + title + " "
	if ansi.StringWidth(head) > w-2 {
		head = ansi.Truncate(head, w-2, "")
	}
	top := tl + head + strings.Repeat(hz, w-2-ansi.StringWidth(head)) + tr
	out := make([]string, 0, h)
	out = append(out, t.render(st, top))
	side := t.render(st, vt)
	for _, l := range fitLines(lines, w-2, h-2) {
		out = append(out, side+l+side)
	}
	out = append(out, t.render(st, bl+strings.Repeat(hz, w-2)+br))
	return out
}

// joinH places blocks of lines side by side (each already of its width
// and of equal height).
func joinH(blocks ...[]string) []string {
	if len(blocks) == 0 {
		return nil
	}
	out := make([]string, len(blocks[0]))
	for i := range out {
		var b strings.Builder
		for _, bl := range blocks {
			if i < len(bl) {
				b.WriteString(bl[i])
			}
		}
		out[i] = b.String()
	}
	return out
}

// pct renders a fraction as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// padRight pads (or truncates) a plain string to n cells.
func padRight(s string, n int) string { return fit(s, n) }

// padLeft right-aligns a plain string in n cells.
func padLeft(s string, n int) string {
	w := ansi.StringWidth(s)
	if w >= n {
		return fit(s, n)
	}
	return strings.Repeat(" ", n-w) + s
}

// widthOf is the display width of s, ANSI sequences excluded.
func widthOf(s string) int { return ansi.StringWidth(s) }

// wrap breaks plain text at spaces into lines of at most w cells, each
// starting with indent.
func wrap(s string, w int, indent string) []string {
	return wrapItems(strings.Fields(s), " ", w, indent)
}

// wrapItems packs items joined by sep into lines of at most w cells; an
// item longer than a line gets a line of its own (and is cut by the frame).
func wrapItems(items []string, sep string, w int, indent string) []string {
	var out []string
	cur := ""
	for _, it := range items {
		switch {
		case cur == "":
			cur = indent + it
		case widthOf(cur)+widthOf(sep)+widthOf(it) <= w:
			cur += sep + it
		default:
			out = append(out, cur)
			cur = indent + it
		}
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}
