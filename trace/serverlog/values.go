package serverlog

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Helpers every server's rules share: hits for figures the servers print,
// and the numbers and sizes inside their lines.

// gib is 2^30 bytes. vLLM ≤ 0.8 printed "GB" for figures it computed in
// GiB (consumed_memory / 2**30), and SGLang does the same, so both units
// convert with 2^30.
const gib = float64(1 << 30)

const mib = float64(1 << 20)

func (p *Parser) add(h hit) { p.hits = append(p.hits, h) }

func (p *Parser) setWorkers(n int) {
	if n > p.workersKnown && n < 1<<16 {
		p.workersKnown = n
	}
}

// took is a span known only by its end (this line) and its length, which
// the server states.
func took(stage trace.Stage, at time.Duration, secs float64) hit {
	return hit{stage: stage, op: opClose, start: at - seconds(secs), hasStart: true, reported: secs, hasReported: true, stated: true}
}

// maxStated bounds a stage's length as a server states it (115 days, far
// above any startup), so that garbage cannot overflow the session clock.
const maxStated = 1e7 * time.Second

// seconds converts a server's figure to a duration, bounded by maxStated.
func seconds(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	if s > maxStated.Seconds() {
		return maxStated
	}
	return time.Duration(s * float64(time.Second))
}

// atof reads a figure; one too large for a float64 comes back ±Inf, which
// the parser refuses (refuse) instead of reading it as zero.
func atof(s string) float64 {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0
	}
	return f
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// parseSize reads "15.0 GiB", "800MB", "1.2 KiB".
func parseSize(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] == '.' || (s[i] >= '0' && s[i] <= '9')) {
		i++
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil {
		return 0, false
	}
	switch strings.TrimSpace(s[i:]) {
	case "B":
		return v, true
	case "KB":
		return v * 1e3, true
	case "MB":
		return v * 1e6, true
	case "GB":
		return v * 1e9, true
	case "TB":
		return v * 1e12, true
	case "KiB":
		return v * 1024, true
	case "MiB":
		return v * mib, true
	case "GiB":
		return v * gib, true
	case "TiB":
		return v * gib * 1024, true
	}
	return 0, false
}
