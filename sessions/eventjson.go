package sessions

import (
	"math"
	"strconv"

	"github.com/treni-top/treni-top/trace"
)

// appendEvent appends the session line of e, byte for byte what
// encoding/json writes for it (HTML escaping off, as the recorder sets),
// for the events an import writes: log lines (appendLogEvent), stage
// spans, markers and process starts and exits whose attributes are
// numbers, strings and booleans. Encoding them by reflection was most of
// the cost of writing a session. It returns false, having appended
// nothing, for any other event and for a value encoding/json refuses (a
// number that is not finite): the caller encodes that one with
// encoding/json, which says what is wrong. order, when not nil, keeps the
// last attributes' keys for the next event (attrOrder). FuzzEventEncoding
// holds it to encoding/json.
func appendEvent(dst []byte, e *trace.Event, order *attrOrder) ([]byte, bool) {
	n := 0
	for _, set := range []bool{e.Stage != nil, e.Sample != nil, e.Request != nil, e.Log != nil, e.Process != nil, e.Marker != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return dst, false
	}
	switch {
	case e.Log != nil:
		if e.Kind != trace.KindLog {
			return dst, false // appendLogEvent writes the kind log
		}
		return appendLogEvent(dst, e), true
	case e.Stage != nil:
		return appendSpanEvent(dst, e, order)
	case e.Marker != nil:
		line := appendEventHead(dst, e)
		line = append(line, `,"marker":{"name":`...)
		line = appendJSONString(line, e.Marker.Name)
		if len(e.Marker.Attrs) > 0 {
			var ok bool
			if line, ok = appendAttrs(append(line, `,"attrs":`...), e.Marker.Attrs, order); !ok {
				return dst, false
			}
		}
		return append(line, "}}\n"...), true
	case e.Process != nil:
		dst = appendEventHead(dst, e)
		return appendProcess(append(dst, `,"process":`...), e.Process), true
	}
	return dst, false
}

// appendEventHead appends `{"t":…,"kind":…` and the run when it is not 0.
func appendEventHead(dst []byte, e *trace.Event) []byte {
	dst = append(dst, `{"t":`...)
	dst = strconv.AppendInt(dst, int64(e.At), 10)
	dst = append(dst, `,"kind":`...)
	dst = appendJSONString(dst, string(e.Kind))
	if e.Run != 0 {
		dst = append(dst, `,"run":`...)
		dst = strconv.AppendInt(dst, int64(e.Run), 10)
	}
	return dst
}

// appendSpanEvent appends a stage event; false when its attributes are
// not all appendAttrs'.
func appendSpanEvent(dst []byte, e *trace.Event, order *attrOrder) ([]byte, bool) {
	s := e.Stage
	line := appendEventHead(dst, e)
	line = append(line, `,"stage":{"name":`...)
	line = appendJSONString(line, string(s.Name))
	line = append(line, `,"start":`...)
	line = strconv.AppendInt(line, int64(s.Start), 10)
	line = append(line, `,"end":`...)
	line = strconv.AppendInt(line, int64(s.End), 10)
	if s.Open {
		line = append(line, `,"open":true`...)
	}
	if s.Source != "" {
		line = append(line, `,"source":`...)
		line = appendJSONString(line, s.Source)
	}
	if s.Workers != 0 {
		line = append(line, `,"workers":`...)
		line = strconv.AppendInt(line, int64(s.Workers), 10)
	}
	if len(s.Attrs) > 0 {
		var ok bool
		if line, ok = appendAttrs(append(line, `,"attrs":`...), s.Attrs, order); !ok {
			return dst, false
		}
	}
	return append(line, "}}\n"...), true
}

func appendProcess(dst []byte, p *trace.Process) []byte {
	dst = append(dst, `{"action":`...)
	dst = appendJSONString(dst, p.Action)
	dst = append(dst, `,"pid":`...)
	dst = strconv.AppendInt(dst, int64(p.PID), 10)
	if len(p.Command) > 0 {
		dst = append(dst, `,"command":[`...)
		for i, c := range p.Command {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, c)
		}
		dst = append(dst, ']')
	}
	if p.ServerKind != "" {
		dst = append(dst, `,"server_kind":`...)
		dst = appendJSONString(dst, p.ServerKind)
	}
	if p.ExitCode != 0 {
		dst = append(dst, `,"exit_code":`...)
		dst = strconv.AppendInt(dst, int64(p.ExitCode), 10)
	}
	if p.Signal != "" {
		dst = append(dst, `,"signal":`...)
		dst = appendJSONString(dst, p.Signal)
	}
	if p.Expected {
		dst = append(dst, `,"expected":true`...)
	}
	if p.Builtin {
		dst = append(dst, `,"builtin":true`...)
	}
	return append(dst, "}}\n"...)
}

// attr is one attribute, for sorting.
type attr struct {
	k string
	v any
}

// attrOrder is the sorted keys of the attributes appendAttrs wrote last:
// the events of a log carry the same few keys again and again, and
// looking each up costs a fraction of ranging over the map (most of
// writing a stage event of the built-in engine's) and sorting.
type attrOrder struct {
	keys []string
}

// appendAttrs appends a map of finite float64s, ints, strings and
// booleans as encoding/json does (keys sorted); false, with dst as it
// was, when a value is of another type or not finite. order (nil: none)
// gives the keys' order when a holds the same keys as the attributes
// before, and keeps a's for the next.
func appendAttrs(dst []byte, a trace.Attrs, order *attrOrder) ([]byte, bool) {
	var arr [16]attr
	kv := arr[:0]
	if order != nil && len(a) > 0 && len(order.keys) == len(a) {
		// As many keys, each of them in a: the same keys.
		for _, k := range order.keys {
			v, ok := a[k]
			if !ok {
				kv = kv[:0]
				break
			}
			kv = append(kv, attr{k, v})
		}
	}
	if len(kv) == 0 {
		for k, v := range a {
			kv = append(kv, attr{k, v})
		}
		// Insertion sort: a few keys.
		for i := 1; i < len(kv); i++ {
			for j := i; j > 0 && kv[j].k < kv[j-1].k; j-- {
				kv[j], kv[j-1] = kv[j-1], kv[j]
			}
		}
		if order != nil {
			order.keys = order.keys[:0]
			for _, p := range kv {
				order.keys = append(order.keys, p.k)
			}
		}
	}
	for _, p := range kv {
		switch v := p.v.(type) {
		case float64:
			if math.IsInf(v, 0) || math.IsNaN(v) {
				return dst, false
			}
		case int, int64, string, bool:
		default:
			return dst, false
		}
	}
	dst = append(dst, '{')
	for i, p := range kv {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, p.k)
		dst = append(dst, ':')
		switch v := p.v.(type) {
		case float64:
			dst = appendJSONFloat(dst, v)
		case int:
			dst = strconv.AppendInt(dst, int64(v), 10)
		case int64:
			dst = strconv.AppendInt(dst, v, 10)
		case string:
			dst = appendJSONString(dst, v)
		case bool:
			dst = strconv.AppendBool(dst, v)
		}
	}
	return append(dst, '}'), true
}

// appendJSONFloat is encoding/json's float64: the shortest decimal that
// reads back the same, in exponent form below 1e-6 and from 1e21 on
// (with a one-digit negative exponent written without its zero).
func appendJSONFloat(dst []byte, f float64) []byte {
	// A whole number below 2^53 has no shorter reading than its digits
	// (neighbouring floats are at most 1 apart), so the shortest decimal
	// is the integer: written as one, at a fraction of the cost (byte
	// counts are most of an import's numbers). -0 keeps its sign below.
	if f == math.Trunc(f) && math.Abs(f) < 1e15 && (f != 0 || !math.Signbit(f)) {
		return strconv.AppendInt(dst, int64(f), 10)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
