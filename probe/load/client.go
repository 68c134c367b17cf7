package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/treni-top/treni-top/probe/netstamp"
	"github.com/treni-top/treni-top/probe/prober"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/httpserve"
)

// Why not prober.Client: the prober is built for a handful of carefully
// timed requests and keeps everything a person might want to look at — it
// decodes every chunk with encoding/json, accumulates the generated text,
// copies each event's data and emits a live event at the first token, and
// its transport keeps at most 64 idle connections to the host. At 1,000
// concurrent streams and 100,000 chunks a second on two cores those costs
// are a large share of a core taken from the server under test. This client
// shares the prober's request format (prober.Template.Body), endpoints,
// error kinds and TTFT/ITL definitions, but reads the stream with a
// zero-allocation chunk walker (chunk.go) and allocates nothing per token
// beyond the timestamp slice, which is sized up front from max_tokens.

// ClientConfig configures a Client.
type ClientConfig struct {
	// BaseURL is the server, e.g. http://127.0.0.1:8000 (no path).
	BaseURL string
	// Endpoint is prober.Chat (default) or prober.Completions.
	Endpoint prober.Endpoint
	Model    string
	// MaxConns bounds connections to the server; it should be at least
	// the concurrency (0: 1024).
	MaxConns int
	// Timeout bounds one request, stream included (0: none beyond the
	// context).
	Timeout time.Duration
	// Header is added to every request (Authorization…).
	Header http.Header
	// Extra fields are merged into every request body (ignore_eos…).
	Extra map[string]any
	// NoUsage leaves out stream_options.include_usage for servers that
	// reject it; output counts then come from counting chunks.
	NoUsage bool
	// ReadTimestamps times tokens when the client reads them instead of
	// when the kernel received them (package netstamp). The kernel's
	// stamps keep the client's own scheduling delay out of TTFT and ITL;
	// read times are what most benchmarks record, kept for comparison.
	// HTTPS streams and systems other than Linux are always timed on read.
	ReadTimestamps bool
}

// Client sends streaming completion requests and times them. It is safe
// for concurrent use.
type Client struct {
	cfg   ClientConfig
	http  *http.Client
	tr    *http.Transport
	clock trace.Clock
	// stamps keeps the kernel's receive timestamping on while the client
	// lives (nil when not used).
	stamps io.Closer
}

// NewClient checks cfg and returns a client that timestamps with clock.
func NewClient(cfg ClientConfig, clock trace.Clock) (*Client, error) {
	if _, ok := httpserve.ParseHTTPURL(cfg.BaseURL); !ok {
		return nil, fmt.Errorf("%q is not a server URL; give its base, e.g. http://127.0.0.1:8000", cfg.BaseURL)
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	switch cfg.Endpoint {
	case "":
		cfg.Endpoint = prober.Chat
	case prober.Chat, prober.Completions:
	default:
		return nil, fmt.Errorf("endpoint %q is not supported by bench; use chat or completions", cfg.Endpoint)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	dialer := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	var stamps io.Closer
	if !cfg.ReadTimestamps {
		dial = (&netstamp.Dialer{Dialer: dialer, Clock: clock}).DialContext
		stamps = netstamp.KeepOn()
	}
	tr := &http.Transport{
		Proxy:       http.ProxyFromEnvironment,
		DialContext: dial,
		// Compression would make the transport buffer the stream.
		DisableCompression:  true,
		MaxConnsPerHost:     cfg.MaxConns,
		MaxIdleConns:        cfg.MaxConns,
		MaxIdleConnsPerHost: cfg.MaxConns,
		IdleConnTimeout:     90 * time.Second,
		ReadBufferSize:      32 << 10,
		WriteBufferSize:     32 << 10,
	}
	return &Client{cfg: cfg, tr: tr, http: &http.Client{Transport: tr}, clock: clock, stamps: stamps}, nil
}

// Config is the client's configuration, defaults filled.
func (c *Client) Config() ClientConfig { return c.cfg }

// TimestampSource says where token times come from: "kernel" when
// connections carry the kernel's receive stamps (Linux, plain http, not
// turned off), else "read".
func (c *Client) TimestampSource() string {
	if netstamp.Supported && !c.cfg.ReadTimestamps && strings.HasPrefix(c.cfg.BaseURL, "http://") {
		return "kernel"
	}
	return "read"
}

// Close releases idle connections and the timestamp keeper. Requests
// still running keep working; their tokens may then be timed on read.
func (c *Client) Close() {
	c.tr.CloseIdleConnections()
	if c.stamps != nil {
		c.stamps.Close()
	}
}

// template is the prober's description of one request.
func (c *Client) template(prompt string, maxTokens int) prober.Template {
	return prober.Template{
		BaseURL: c.cfg.BaseURL, Endpoint: c.cfg.Endpoint, Model: c.cfg.Model,
		Prompt: prompt, MaxTokens: maxTokens, NoUsage: c.cfg.NoUsage, Extra: c.cfg.Extra,
	}
}

// Do sends one request and reads its stream to the end. It never returns an
// error: what went wrong is in Request.Error and Request.ErrorKind (the
// prober's kinds), and what was timed before that is kept. p, when not nil,
// is told about the first token, every gap and the end.
func (c *Client) Do(ctx context.Context, it Item, id, label string, phase trace.Phase, p *Progress) (r trace.Request) {
	r = trace.Request{ID: id, Label: label, Phase: phase, Endpoint: string(c.cfg.Endpoint)}
	r.Tokens = make([]time.Duration, 0, it.MaxTokens+2)
	defer func() { r.Done = true }()
	t := c.template(it.Prompt, it.MaxTokens)
	body, err := t.Body()
	if err != nil {
		r.Error, r.ErrorKind = err.Error(), prober.KindMalformed
		return r
	}
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	var firstByte atomic.Int64
	conn := &netstamp.Tracker{}
	ctx = httptrace.WithClientTrace(ctx, conn.Trace(c.clock, func(at time.Duration) { firstByte.CompareAndSwap(0, int64(at)) }))
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL(), bytes.NewReader(body))
	if err != nil {
		r.Error, r.ErrorKind = fmt.Sprintf("bad server URL %q: %v", c.cfg.BaseURL, err), prober.KindConnect
		return r
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	for k, vs := range c.cfg.Header {
		for _, v := range vs {
			hreq.Header.Add(k, v)
		}
	}
	r.Sent = c.clock.Now()
	resp, err := c.http.Do(hreq)
	if fb := firstByte.Load(); fb != 0 {
		r.FirstByte = max(time.Duration(fb)-r.Sent, 1)
	}
	if err != nil {
		r.End = c.since(r.Sent)
		r.ErrorKind, r.Error = classify(ctx, err, false)
		return r
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	if r.FirstByte == 0 {
		r.FirstByte = c.since(r.Sent)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		r.End = c.since(r.Sent)
		r.ErrorKind = prober.KindHTTP4xx
		if resp.StatusCode >= 500 {
			r.ErrorKind = prober.KindHTTP5xx
		}
		r.Error = fmt.Sprintf("HTTP %d from %s: %s%s", resp.StatusCode, t.URL(), prober.ErrorMessage(b), prober.AuthHint(resp.StatusCode, hreq.Header.Get("Authorization") != ""))
		return r
	}
	complete, malformed, err := c.read(resp.Body, &r, p, conn)
	if r.End == 0 {
		r.End = c.since(r.Sent)
	}
	switch {
	case r.Error != "":
		// an error reported inside the stream, already recorded
	case err != nil:
		r.ErrorKind, r.Error = classify(ctx, err, true)
	case !complete:
		r.ErrorKind = prober.KindClosedEarly
		r.Error = fmt.Sprintf("the server closed the stream after %d token chunks without its end marker (crashed or restarted?)", len(r.Tokens))
	case malformed > 0:
		r.ErrorKind = prober.KindMalformed
		r.Error = fmt.Sprintf("%d stream events could not be parsed; the server does not speak the %s protocol as expected", malformed, c.cfg.Endpoint)
	}
	return r
}

func (c *Client) since(sent time.Duration) time.Duration { return max(c.clock.Now()-sent, 1) }

// maxEvent bounds one SSE event, so that a server that never sends a
// newline cannot make the client buffer without limit.
const maxEvent = 8 << 20

// read consumes the event stream. The timestamp of an event is that of its
// first data line: when the read that completed the line received its
// bytes (the kernel's stamp), or, without stamps, the moment the line is
// seen. Reads happen only when the buffers above the connection run dry, so
// the latest read is the one that brought the line in.
func (c *Client) read(body io.ReadCloser, r *trace.Request, p *Progress, conn *netstamp.Tracker) (complete bool, malformed int, err error) {
	br := bufio.NewReaderSize(body, 16<<10)
	s := stream{r: r, p: p}
	var long []byte // a line longer than the buffer
	for {
		line, rerr := readLine(br, &long)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return false, s.malformed, rerr
		}
		if len(line) == 0 && rerr != nil { // EOF
			if s.has && s.dispatch() {
				break
			}
			return s.finished, s.malformed, nil
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if s.has && s.dispatch() {
				r.End = conn.Since(c.clock, r.Sent) // the end marker's arrival
				drain(br, body)
				return s.complete || r.Error != "", s.malformed, nil
			}
			s.errType = false
		case line[0] == ':':
			// a comment (keep-alive)
		case bytes.HasPrefix(line, []byte("data:")):
			var at time.Duration // an event's instant is its first line's
			if !s.has {
				at = conn.Since(c.clock, r.Sent)
			}
			if err := s.data(line[5:], at); err != nil {
				return false, s.malformed, err
			}
		case bytes.HasPrefix(line, []byte("event:")):
			s.errType = string(bytes.TrimSpace(line[6:])) == "error"
		}
		if rerr != nil { // EOF after a last unterminated line
			if s.has && s.dispatch() {
				break
			}
			return s.finished, s.malformed, nil
		}
	}
	r.End = c.since(r.Sent)
	return s.complete || r.Error != "", s.malformed, nil
}

// errLineTooLong is a stream line beyond maxEvent.
var errLineTooLong = errors.New("stream line longer than 8 MiB")

// readLine reads one line of the stream, through *long when it is longer
// than the reader's buffer (up to maxEvent, else errLineTooLong). The
// line is valid until the next read.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	line, rerr := br.ReadSlice('\n')
	if !errors.Is(rerr, bufio.ErrBufferFull) {
		return line, rerr
	}
	*long = append((*long)[:0], line...)
	for errors.Is(rerr, bufio.ErrBufferFull) && len(*long) <= maxEvent {
		line, rerr = br.ReadSlice('\n')
		*long = append(*long, line...)
	}
	if len(*long) > maxEvent {
		return nil, errLineTooLong
	}
	return *long, rerr
}

// stream is what read keeps of one response: the pending event, what the
// chunks so far said, and the request it fills in.
type stream struct {
	r *trace.Request
	p *Progress

	ev        []byte // the pending event's data
	evAt      time.Duration
	has       bool
	errType   bool // the pending event is an "event: error"
	finished  bool // a chunk carried a finish reason
	usage     prober.UsageCounter
	ch        chunk
	complete  bool // the end marker came
	malformed int
}

// data adds a data line's value (after "data:") to the pending event; a
// first line opens it at the instant at (ignored for the lines after).
func (s *stream) data(v []byte, at time.Duration) error {
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	if !s.has {
		s.evAt = at
		s.ev = append(s.ev[:0], v...)
		s.has = true
	} else {
		s.ev = append(s.ev, '\n')
		s.ev = append(s.ev, v...)
	}
	if len(s.ev) > maxEvent {
		return errors.New("stream event longer than 8 MiB")
	}
	return nil
}

// dispatch handles the pending event; stop says the stream is over (its
// end marker, or an error the server reported).
func (s *stream) dispatch() (stop bool) {
	r := s.r
	s.has = false
	if r.FirstEvent == 0 {
		r.FirstEvent = s.evAt
	}
	data := bytes.TrimSpace(s.ev)
	if string(data) == "[DONE]" {
		s.complete = true
		return true
	}
	if s.errType {
		r.ErrorKind, r.Error = prober.KindServer, "the server reported an error mid-stream: "+prober.ErrorMessage(data)
		return true
	}
	if len(data) == 0 {
		return false
	}
	if !parseChunk(data, &s.ch) {
		s.malformed++
		return false
	}
	if s.ch.errored {
		var v struct {
			Error json.RawMessage `json:"error"`
		}
		_ = json.Unmarshal(data, &v)
		r.ErrorKind, r.Error = prober.KindServer, "the server reported an error mid-stream: "+prober.ErrorMessage(v.Error)
		return true
	}
	s.finished = s.finished || s.ch.finished
	s.tokens(s.ch.tokens)
	return false
}

// tokens counts the chunk's n tokens (more when per-chunk usage says so)
// at the event's instant: the first token, or a gap after the last.
func (s *stream) tokens(n int) {
	r, ch := s.r, &s.ch
	if ch.usage {
		n = s.usage.Count(n, len(r.Tokens) == 0, ch.completionTokens)
		r.PromptTokens, r.CompletionTokens = ch.promptTokens, ch.completionTokens
	}
	if n > 0 {
		if n > 1 {
			r.MultiTokenChunks++
		}
		if len(r.Tokens) == 0 {
			r.FirstToken = s.evAt
			s.p.firstToken(s.evAt)
		} else {
			s.p.gap(s.evAt - r.Tokens[len(r.Tokens)-1])
		}
		r.Tokens = append(r.Tokens, s.evAt)
		s.p.tokens(n)
	}
}

// drain reads what little follows the end marker (the chunked encoding's
// last chunk), so that the connection can be reused. It gives up after
// 64 KiB or a second — a server that keeps the response open after [DONE]
// must not hold the request — and the connection is then closed instead.
func drain(r io.Reader, body io.Closer) {
	t := time.AfterFunc(time.Second, func() { body.Close() })
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(r, 64<<10))
}

// classify names a transport error, with the prober's kinds. started says
// whether the response had begun.
func classify(ctx context.Context, err error, started bool) (kind, msg string) {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return prober.KindTimeout, "timed out: " + err.Error() + " (raise --timeout if the server is just slow)"
	case errors.Is(ctx.Err(), context.Canceled):
		return prober.KindCanceled, "canceled: " + err.Error()
	case started, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return prober.KindClosedEarly, "the server closed the connection early: " + err.Error()
	default:
		return prober.KindConnect, "cannot reach the server: " + err.Error() + " (is it running and listening on that address?)"
	}
}

// DetectModel asks the server's /v1/models for the model it serves (the
// first one listed).
func DetectModel(ctx context.Context, baseURL string, header http.Header) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	u := strings.TrimRight(baseURL, "/") + "/v1/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("%q is not a server URL; give its base, e.g. http://127.0.0.1:8000: %w", baseURL, err)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("ask %s which model it serves (is the server running? or pass --model): %w", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		if hint := prober.AuthHint(resp.StatusCode, req.Header.Get("Authorization") != ""); hint != "" {
			return "", fmt.Errorf("GET %s: HTTP %d: %s%s", u, resp.StatusCode, prober.ErrorMessage(b), hint)
		}
		return "", fmt.Errorf("GET %s: HTTP %d: %s (pass --model)", u, resp.StatusCode, prober.ErrorMessage(b))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return "", fmt.Errorf("GET %s did not return an OpenAI model list (pass --model): %w", u, err)
	}
	for _, m := range list.Data {
		if m.ID != "" {
			return m.ID, nil
		}
	}
	return "", fmt.Errorf("GET %s lists no model; pass --model", u)
}
