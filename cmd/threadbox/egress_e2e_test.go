package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestServeRestrictedEgress drives serve's wiring of sandbox.network: restricted on Docker through the
// web chat (shell runtime, so the forwarder runs for egress alone): a host on sandbox.egress.allow (a
// loopback server, named by its address as only an explicit entry may) answers through the proxy;
// the metadata address is refused with the proxy's reason, and the refusal is on /metrics.
func TestServeRestrictedEgress(t *testing.T) {
	prov := dockertest.New(t, docker.Options{})
	dep := fmt.Sprintf("egress-e2e-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		list, _ := prov.List(context.Background(), map[string]string{sandbox.LabelDeployment: dep})
		for _, i := range list {
			_ = prov.Destroy(context.Background(), i.Handle)
		}
	})
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "mirror-answers\n")
	}))
	t.Cleanup(mirror.Close)
	mu, _ := url.Parse(mirror.URL)
	sockDir, err := os.MkdirTemp("/tmp", "tbe2e")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })

	sv := serveInProcess(t, baseEnv(t,
		"THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true", "THREADBOX_DEPLOYMENT="+dep,
		"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_IMAGE="+dockertest.Image(),
		"THREADBOX_SANDBOX_NETWORK=restricted", "THREADBOX_SANDBOX_EGRESS_ALLOW=127.0.0.1:"+mu.Port(),
		"THREADBOX_GATEWAY_SOCKET_DIR="+sockDir, "THREADBOX_GATEWAY_FORWARDER="+staticForwarder(t),
		"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=1s"))
	s := &server{url: "http://" + sv.addr}
	conv := s.post(t, "/api/conversations", map[string]any{})["id"].(string)
	ev := s.events(t, conv)

	// The forwarder starts with the sandbox; the first command waits for it to listen.
	s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "i=0; until wget -q -O /dev/null -Y off http://127.0.0.1:18081/ 2>&1 | grep -q 400; " +
		"do i=$((i+1)); [ $i -lt 250 ] || break; usleep 20000; done; echo proxy=$HTTP_PROXY"})
	ev.until(t, "post", "proxy=http://127.0.0.1:18081")
	s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "wget -q -O- http://127.0.0.1:" + mu.Port() + "/"})
	ev.until(t, "post", "mirror-answers")
	s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "wget -O- http://169.254.169.254/latest/meta-data/ 2>&1; echo rc=$?"})
	ev.until(t, "post", "403 Forbidden")

	resp, err := http.Get(s.url + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(body), `threadbox_egress_requests_total{result="refused_host"} 1`)
	require.Contains(t, string(body), `threadbox_egress_requests_total{result="allowed"} 1`)

	sv.cancel()
	require.NoError(t, <-sv.done)
	require.NoError(t, sv.m.Close())
}

// staticForwarder builds cmd/threadbox-forward static, for the Docker host (this machine).
func staticForwarder(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "threadbox-forward")
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-trimpath", "-o", out, "github.com/threadbox/threadbox/cmd/threadbox-forward")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goruntime.GOARCH)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build threadbox-forward: %s", b)
	return out
}
