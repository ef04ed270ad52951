// Package dockertest gives tests a Docker sandbox provider on the real engine, or skips them (or,
// with THREADBOX_REQUIRE_SERVICES set, fails them with the fix) when the engine or the test image
// is missing.
package dockertest

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// DefaultImage is the FROM-scratch busybox image deploy/sandbox-image/build.sh test builds.
const DefaultImage = "threadbox/sandbox-test:latest"

// Image is the test image: THREADBOX_TEST_SANDBOX_IMAGE, or DefaultImage.
func Image() string {
	if img := os.Getenv("THREADBOX_TEST_SANDBOX_IMAGE"); img != "" {
		return img
	}
	return DefaultImage
}

// New returns a provider on the engine named by the DOCKER_* environment, closed when t ends. Its
// log goes to t.
func New(t testing.TB, opts docker.Options) *docker.Provider {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t) // shown with the test's output when it fails
	}
	p, err := docker.New(ctx, opts)
	sandboxtest.RequireService(t, "docker daemon", err)
	t.Cleanup(func() { _ = p.Close() })
	sandboxtest.RequireService(t, "sandbox test image", p.CheckImage(ctx, Image()))
	return p
}
