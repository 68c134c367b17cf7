package launch

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
)

// serverHelperEnv makes the test binary a small HTTP server, so tests
// launch a real server whose listening socket belongs to the launched
// tree (an in-process httptest server would be another process's, which
// the launcher rightly refuses).
const serverHelperEnv = "TRENI_LAUNCH_SERVER_HELPER"

// TestHelperServer is not a test: run by serverSpec as the launched
// target, it listens on $TRENI_LAUNCH_SERVER_ADDR (127.0.0.1:0 picks a
// port), prints uvicorn's listening line and serves until killed.
// Modes: "ok" answers 200 everywhere; "quiet" too, without the listening
// line; "loading" has no /health and answers 503 on /v1/models four times
// before 200.
func TestHelperServer(t *testing.T) {
	mode := os.Getenv(serverHelperEnv)
	if mode == "" {
		t.Skip("helper process for the launch tests")
	}
	l, err := net.Listen("tcp", os.Getenv("TRENI_LAUNCH_SERVER_ADDR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper server:", err)
		os.Exit(3)
	}
	var polls atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mode == "loading" {
			switch r.URL.Path {
			case "/v1/models":
				if polls.Add(1) < 5 {
					http.Error(w, "loading", http.StatusServiceUnavailable)
					return
				}
			default:
				http.NotFound(w, r)
				return
			}
		}
		fmt.Fprint(w, `{"data":[]}`)
	})
	if mode != "quiet" {
		fmt.Printf("INFO: Uvicorn running on http://%s (Press CTRL+C to quit)\n", l.Addr())
	}
	_ = http.Serve(l, h)
	os.Exit(0)
}

// serverSpec launches TestHelperServer in mode on addr.
func serverSpec(mode, addr string) Spec {
	return Spec{
		Command: []string{os.Args[0], "-test.run=^TestHelperServer$"},
		Env:     []string{serverHelperEnv + "=" + mode, "TRENI_LAUNCH_SERVER_ADDR=" + addr},
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	n, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
