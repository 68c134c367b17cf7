package launch

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/treni-top/treni-top/trace/serverlog"
)

// BuiltinSpec builds the Spec that runs the built-in engine as a child of
// this very binary: `treni-top serve --model DIR --addr 127.0.0.1:PORT
// [--device DEV]`, on a free port picked now so health polling can start at
// once. A child, not a goroutine, so its cold start, RSS and GPU memory are
// its own (docs/ARCHITECTURE.md, "Packages").
func BuiltinSpec(modelDir, device string, extra ...string) (Spec, error) {
	exe, err := os.Executable()
	if err != nil {
		return Spec{}, fmt.Errorf("find treni-top's own executable to start the built-in engine: %w", err)
	}
	port, err := FreePort()
	if err != nil {
		return Spec{}, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := []string{exe, "serve", "--model", modelDir, "--addr", addr}
	if device != "" {
		cmd = append(cmd, "--device", device)
	}
	cmd = append(cmd, extra...)
	return Spec{Command: cmd, URL: "http://" + addr, Kind: serverlog.KindTreni, Builtin: true}, nil
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1. Another
// process could take it before the server binds it; the window is short and
// the health poll would then report the wrong server's failure loudly.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port for the built-in engine: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
