// Package sessions is treni-top's session file and what is computed from it:
// the JSON Lines format (a header line, then one event per line), the
// recorder that writes it as events happen, the reader, replay onto the live
// event stream, per-run summaries, reports (Markdown, JSON, Chrome trace),
// diffs between sessions, and import of server logs.
package sessions

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// NewImportHeader is the header of an imported log: no facts of the
// machine that imports it (an import says where the log came from, in
// Origin, or nothing).
func NewImportHeader(toolVersion string, created time.Time, target Target, origin Origin) Header {
	o := origin
	return Header{Format: FormatName, Version: FormatVersion, ToolVersion: toolVersion, Created: created.Round(0), Target: target, Origin: &o}
}

// FormatName identifies a treni-top session file in its header line.
const FormatName = "treni-top-session"

// FormatVersion is the version this build writes. Readers accept any minor
// version of the same major (unknown fields and event kinds are skipped) and
// refuse other majors. 1.1 added the clean-end marker
// (trace.MarkerSessionEnd) and the header's origin.
const FormatVersion = "1.1"

// writesEndMarker reports whether a file of format version v ends with the
// clean-end marker when its recorder closed it (1.1 and later).
func writesEndMarker(v string) bool {
	major, minor, _ := strings.Cut(v, ".")
	m, err := strconv.Atoi(minor)
	return major == "1" && err == nil && m >= 1
}

// Header is the first line of a session file.
type Header struct {
	Format      string `json:"format"`
	Version     string `json:"version"`
	ToolVersion string `json:"tool_version"`
	// Created is the wall-clock time of offset zero.
	Created    time.Time   `json:"created"`
	Host       Host        `json:"host"`
	GPUs       []GPU       `json:"gpus,omitempty"`
	Target     Target      `json:"target"`
	ModelFiles []ModelFile `json:"model_files,omitempty"`
	// Origin is what an imported log states about where it was written;
	// Host and GPUs then stay empty unless the log states them.
	Origin *Origin `json:"origin,omitempty"`
	// Notes are free-form remarks (the import source, a bench workload…).
	Notes map[string]string `json:"notes,omitempty"`

	// ColdRuns is how many cold starts `run --cold-runs` asked for (0:
	// not a run, or a file from before the flag). The runs themselves are
	// the events'; a file holding fewer complete runs than this says the
	// series stopped at a failed one.
	ColdRuns int `json:"cold_runs,omitempty"`
}

// Origin describes where an imported log was written, as far as the log
// says: never the importing machine.
type Origin struct {
	// Source is the log file's path.
	Source string `json:"source,omitempty"`
	// Server is the server kind, and Version its version as printed.
	Server  string `json:"server,omitempty"`
	Version string `json:"version,omitempty"`
	// Device is the compute platform the log names (cuda, rocm, metal,
	// cpu…), GPUs the accelerators it names, TP the tensor-parallel size.
	Device string   `json:"device,omitempty"`
	GPUs   []string `json:"gpus,omitempty"`
	TP     int      `json:"tp,omitempty"`
	Model  string   `json:"model,omitempty"`
	// Host is the host a log collector's prefix names (journald), else
	// empty: unknown.
	Host string `json:"host,omitempty"`
	// Wrapper names the collector's prefix the lines carried (docker
	// compose, docker logs -t, kubectl logs --prefix, journald/syslog).
	Wrapper string `json:"wrapper,omitempty"`
	// Clock says where the offsets come from: the server's own stamps,
	// the collector's, or none (order only).
	Clock string `json:"clock,omitempty"`
}

// Host describes the machine the session was recorded on.
type Host struct {
	Hostname string `json:"hostname"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Kernel   string `json:"kernel,omitempty"`
	CPUs     int    `json:"cpus"`
	MemBytes uint64 `json:"mem_bytes,omitempty"`
}

// GPU describes one accelerator.
type GPU struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	MemBytes uint64 `json:"mem_bytes,omitempty"`
	Driver   string `json:"driver,omitempty"`
}

// Target kinds.
const (
	TargetBuiltin = "builtin" // the built-in engine as a child process
	TargetCommand = "command" // an external server command
	TargetAttach  = "attach"  // a running server, by URL
	TargetImport  = "import"  // a server log turned into a session
	TargetBench   = "bench"   // a load-generator run against a URL
)

// Target is what was profiled.
type Target struct {
	Kind       string   `json:"kind"`
	ServerKind string   `json:"server_kind,omitempty"` // treni, vllm, sglang, tgi, llama.cpp, ollama
	Command    []string `json:"command,omitempty"`
	URL        string   `json:"url,omitempty"`
	Model      string   `json:"model,omitempty"`
	Device     string   `json:"device,omitempty"` // "cpu", a GPU name, …
}

// Describe is a one-line human description of the target.
func (t Target) Describe() string {
	switch {
	case t.Kind == TargetBuiltin:
		return "built-in engine " + t.Model
	case len(t.Command) > 0:
		return strings.Join(t.Command, " ")
	case t.URL != "":
		return t.URL
	case t.Model != "":
		return t.Model
	}
	return t.Kind
}

// ModelFile is one weight file of the target's model.
type ModelFile struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// NewHeader fills a header with this host's facts.
func NewHeader(toolVersion string, created time.Time, target Target) Header {
	h := Header{
		Format:      FormatName,
		Version:     FormatVersion,
		ToolVersion: toolVersion,
		Created:     created.Round(0),
		Target:      target,
		Host:        Host{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()},
	}
	h.Host.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Host.Kernel = strings.TrimSpace(string(b))
	}
	h.Host.MemBytes = memTotal()
	return h
}

// memTotal reads MemTotal from /proc/meminfo (0 where unavailable).
func memTotal() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// checkVersion accepts any minor version of our major.
func checkVersion(v string) error {
	major, _, _ := strings.Cut(v, ".")
	ours, _, _ := strings.Cut(FormatVersion, ".")
	if major != ours {
		return fmt.Errorf("session format version %q is not readable by this treni-top (it reads %s.x); use a treni-top release that writes version %s.x, or re-record the session", v, ours, major)
	}
	return nil
}

// ModelFilesOf lists the weight files that exist, with their sizes, for
// the header.
func ModelFilesOf(files []string) []ModelFile {
	var out []ModelFile
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			out = append(out, ModelFile{Path: f, Bytes: st.Size()})
		}
	}
	return out
}
