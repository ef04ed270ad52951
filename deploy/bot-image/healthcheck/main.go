// Command healthcheck GETs each URL given and exits 0 only if every one answers 200.
//
// The bot image has no shell and no curl, so a container health check (Docker, compose) needs a
// program of its own to probe /healthz and /readyz. Kubernetes probes the same paths with httpGet
// and does not use it.
//
//	healthcheck [-timeout 3s] http://127.0.0.1:8080/healthz http://127.0.0.1:8080/readyz
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "for all URLs together")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: healthcheck [-timeout D] URL...")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	for _, url := range fs.Args() {
		if err := probe(ctx, url); err != nil {
			fmt.Fprintf(stderr, "healthcheck: %s: %v\n", url, err)
			return 1
		}
	}
	return 0
}

func probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// The body says why a probe failed (readyz: "database: …", "draining: …"); keep a line of it.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return nil
}
