package memstat

import (
	"errors"
	"runtime"
	"testing"
)

const sample = `Name:	treni-top
VmHWM:	  989412 kB
VmRSS:	  453756 kB
RssAnon:	  273636 kB
RssFile:	  165132 kB
RssShmem:	   14988 kB
Threads:	31
`

func TestParse(t *testing.T) {
	r, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := Resident{Total: 453756 << 10, Anon: 273636 << 10, File: 165132 << 10, Shmem: 14988 << 10}
	if r != want {
		t.Fatalf("Parse = %+v, want %+v", r, want)
	}
	if got := MB(r.Total); got != 464.6 { // 453,756 KiB = 464.64 MB
		t.Errorf("MB(VmRSS) = %v, want 464.6", got)
	}
	// A kernel without the split still reports the total.
	if r, err := Parse([]byte("VmRSS:\t 1024 kB\n")); err != nil || r != (Resident{Total: 1 << 20}) {
		t.Errorf("VmRSS alone: %+v, %v", r, err)
	}
	if _, err := Parse([]byte("Name:\tx\nThreads:\t3\n")); !errors.Is(err, ErrNotReported) {
		t.Errorf("no VmRSS: error %v, want ErrNotReported", err)
	}
	for _, bad := range []string{"VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n", "VmRSS:\t-5 kB\n", "RssAnon:\t kB\nVmRSS:\t1 kB\n", "VmRSS:\t99999999999999999999 kB\n"} {
		if _, err := Parse([]byte(bad)); err == nil || errors.Is(err, ErrNotReported) {
			t.Errorf("Parse(%q): error %v, want a malformed-field error", bad, err)
		}
	}
}

func TestSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/self/status is Linux's")
	}
	r, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	// A running Go test binary has its text and heap resident.
	if r.Total <= 0 || r.Anon+r.File+r.Shmem > r.Total+1<<20 || r.Anon <= 0 {
		t.Errorf("Self = %+v: want a positive total of at least its parts", r)
	}
}

// FuzzParse: any status text either parses to non-negative sizes or is an
// error; never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("VmRSS:\t 1 kB"))
	f.Add([]byte("VmRSS:"))
	f.Add([]byte("RssAnon:\t12 kB\nVmRSS:\t\t\t kB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err == nil && (r.Total < 0 || r.Anon < 0 || r.File < 0 || r.Shmem < 0) {
			t.Fatalf("Parse(%q) = %+v", b, r)
		}
	})
}
