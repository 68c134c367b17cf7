package tui

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// theme holds every style the panes use. It is built once per program from
// its own lipgloss renderer (never the package-global one), so NO_COLOR and
// the light theme are properties of the program, not of the process.
type theme struct {
	r *lipgloss.Renderer
	// color is false under NO_COLOR: panes then rely on glyphs (double
	// border for focus, ▶ for the dominant stage) instead of color.
	color bool

	title, dim, bold, accent, warn, bad, good lipgloss.Style
	bar, barOpen, barDominant, gap, axis      lipgloss.Style
	border, borderFocus, match, stageMark     lipgloss.Style
}

// newTheme builds the dark or light palette, or a colorless one.
func newTheme(out io.Writer, noColor, light bool) *theme {
	r := lipgloss.NewRenderer(out)
	if noColor {
		r.SetColorProfile(termenv.Ascii)
	}
	r.SetHasDarkBackground(!light)
	t := &theme{r: r, color: !noColor}
	// Adaptive colors: the first of each pair is for light backgrounds.
	pick := func(lightC, darkC string) lipgloss.Color {
		if light {
			return lipgloss.Color(lightC)
		}
		return lipgloss.Color(darkC)
	}
	fg := pick("#1f2328", "#e6e6e6")
	dim := pick("#6e7781", "#8b949e")
	accent := pick("#0550ae", "#58a6ff")
	warn := pick("#9a6700", "#d29922")
	bad := pick("#cf222e", "#f85149")
	good := pick("#1a7f37", "#3fb950")
	bar := pick("#0969da", "#388bfd")
	open := pick("#8250df", "#a371f7")
	t.title = r.NewStyle().Bold(true).Foreground(fg)
	t.bold = r.NewStyle().Bold(true)
	t.dim = r.NewStyle().Foreground(dim)
	t.accent = r.NewStyle().Foreground(accent)
	t.warn = r.NewStyle().Foreground(warn)
	t.bad = r.NewStyle().Foreground(bad).Bold(true)
	t.good = r.NewStyle().Foreground(good)
	t.bar = r.NewStyle().Foreground(bar)
	t.barOpen = r.NewStyle().Foreground(open)
	t.barDominant = r.NewStyle().Foreground(warn).Bold(true)
	t.gap = r.NewStyle().Foreground(dim)
	t.axis = r.NewStyle().Foreground(dim)
	t.border = r.NewStyle().Foreground(dim)
	t.borderFocus = r.NewStyle().Foreground(accent).Bold(true)
	t.match = r.NewStyle().Reverse(true)
	t.stageMark = r.NewStyle().Foreground(accent).Bold(true)
	return t
}

// render applies st only when colors are on; under NO_COLOR it returns s
// untouched, which keeps golden frames byte-stable and rendering cheap.
func (t *theme) render(st lipgloss.Style, s string) string {
	if !t.color || s == "" {
		return s
	}
	return st.Render(s)
}
