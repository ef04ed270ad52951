package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestServeReportsSandboxLimits drives serve's wiring through the web chat on Docker: a process that
// allocates past the memory limit ends its turn with the memory-limit reply, and a turn that writes
// past disk_mb is stopped with the disk-limit reply.
func TestServeReportsSandboxLimits(t *testing.T) {
	prov := dockertest.New(t, docker.Options{})
	dep := fmt.Sprintf("limits-e2e-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		list, _ := prov.List(context.Background(), map[string]string{sandbox.LabelDeployment: dep})
		for _, i := range list {
			_ = prov.Destroy(context.Background(), i.Handle)
		}
	})
	sv := serveInProcess(t, baseEnv(t,
		"THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true", "THREADBOX_DEPLOYMENT="+dep,
		"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_IMAGE="+dockertest.Image(),
		"THREADBOX_SANDBOX_RESOURCES_MEMORY_MB=512", "THREADBOX_SANDBOX_RESOURCES_DISK_MB=1024",
		"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=1s"))
	s := &server{url: "http://" + sv.addr}
	conv := s.post(t, "/api/conversations", map[string]any{})["id"].(string)
	ev := s.events(t, conv)

	s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "tail /dev/zero"})
	ev.until(t, "post", "hit the 512 MiB memory limit")

	// One file cannot pass disk_mb at all; many files are stopped by the quota.
	s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "dd if=/dev/zero of=big bs=1M count=1100"})
	ev.until(t, "post", "over its 1024 MiB disk limit")
	s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "rm big; echo cleaned"})
	ev.until(t, "post", "cleaned")

	sv.cancel()
	require.NoError(t, <-sv.done)
	require.NoError(t, sv.m.Close())
}
