# treni-top — the two commands for a fresh machine are `make run` and `make test`.
GO      ?= go
BIN     := bin/treni-top
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
PKGS    := ./...
# The linters, pinned: `go run pkg@version` fetches them from the Go module
# proxy on first use, so a fresh machine needs nothing but Go.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
DEADCODE    := golang.org/x/tools/cmd/deadcode@v0.52.0

.PHONY: run build test vet lint fmt fmt-check bench clean e2e-ollama e2e-otel

## run: the interactive profiler on the built-in engine's demo model
run: build
	./$(BIN) $(ARGS)

## build: compile bin/treni-top
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/treni-top

## test: gofmt check, go vet, the linters, then every test with the race detector
test: fmt-check vet lint
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

vet:
	$(GO) vet $(PKGS)

## lint: staticcheck, and deadcode -test (no function unreachable even from a test)
lint:
	$(GO) run $(STATICCHECK) $(PKGS)
	@out=$$($(GO) run $(DEADCODE) -test $(PKGS)) || exit 1; \
	if [ -n "$$out" ]; then echo "deadcode: unreachable functions (remove them):"; echo "$$out"; exit 1; fi

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## fmt: format every Go file
fmt:
	gofmt -w $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')

## bench: every benchmark, five times each (feed the output to benchstat)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 $(PKGS)

## e2e-ollama: treni-top against Ollama v0.9.6 built from source (not in CI: it builds the peer)
e2e-ollama:
	scripts/e2e-ollama.sh

## e2e-otel: OTLP export and fleet /metrics against Jaeger v2 (v1.76.0, built from the module proxy) and Prometheus (not in CI)
e2e-otel:
	scripts/e2e-otel.sh

clean:
	rm -rf bin

# make kernels / make kernels-check: the CUDA fatbin, where nvcc exists.
include engine/cuda/kernels/Makefile.kernels
