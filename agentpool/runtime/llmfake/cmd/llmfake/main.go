// Command llmfake serves the scripted model of package llmfake on an address, for runtimes that run
// in another process or inside a sandbox (build it with CGO_ENABLED=0 to copy it into any image).
//
//	llmfake -addr 127.0.0.1:8089 -script script.json
//
// The script can be replaced at run time with PUT /_llmfake/script, and the recorded requests read
// with GET /_llmfake/requests.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "llmfake:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8089", "listen address")
	scriptPath := flag.String("script", "", "JSON script file (default: answer every call with OK)")
	flag.Parse()

	var script llmfake.Script
	if *scriptPath != "" {
		b, err := os.ReadFile(*scriptPath)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &script); err != nil {
			return fmt.Errorf("%s: %w", *scriptPath, err)
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fake := llmfake.New(script)
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		fake.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintln(os.Stderr, "llmfake: listening on", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
