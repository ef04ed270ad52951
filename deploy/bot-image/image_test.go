// Package botimage holds the test of the bot image that build.sh makes offline from deploy/Dockerfile.
package botimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// imageUser is the USER of deploy/Dockerfile's final stage: distroless's "nonroot" id.
const imageUser = "65532:65532"

// sandboxImage is the busybox sandbox image deploy/test-services.sh builds; serve needs one to name.
const sandboxImage = "threadbox/sandbox-test:latest"

// TestBotImage builds the image offline under a unique tag, then checks it as a user would run it:
// `version` in a plain container, and `serve` locked down as in compose.yaml (read-only root, no
// capabilities, the Docker socket through its group), healthy, as a non-root process.
func TestBotImage(t *testing.T) {
	sandboxtest.RequireService(t, "docker daemon", dockerErr(t.Context(), "info"))
	sandboxtest.RequireService(t, "sandbox test image", dockerErr(t.Context(), "image", "inspect", sandboxImage))

	suffix := randomHex(t)
	tag := "threadbox/threadbox-imagetest:" + suffix
	version := "imagetest-" + suffix
	t.Cleanup(func() { removeImage(t, tag) })
	out, err := run(t.Context(), "./build.sh", "--tag", tag, "--version", version)
	require.NoError(t, err, "build.sh: %s", out)
	require.Equal(t, tag, lastLine(out), "build.sh prints the tag it built")

	t.Run("version runs as the non-root image user", func(t *testing.T) {
		user, err := docker(t.Context(), "image", "inspect", "--format", "{{.Config.User}}", tag)
		require.NoError(t, err, user)
		require.Equal(t, imageUser, strings.TrimSpace(user))

		name := "threadbox-imagetest-version-" + suffix
		t.Cleanup(func() { removeContainer(t, name) })
		out, err := docker(t.Context(), "run", "--rm", "--name", name, tag, "version")
		require.NoError(t, err, out)
		require.Equal(t, "threadbox "+version+"\n", out)
	})

	t.Run("serve is healthy as uid 65532 with a read-only root", func(t *testing.T) {
		name := "threadbox-imagetest-serve-" + suffix
		t.Cleanup(func() { removeContainer(t, name) })
		out, err := docker(t.Context(), "run", "--detach", "--name", name,
			"--read-only", "--tmpfs", "/tmp", "--tmpfs", "/var/lib/threadbox:uid=65532,gid=65532,mode=0700",
			"--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
			"--volume", "/var/run/docker.sock:/var/run/docker.sock", "--group-add", socketGroup(t),
			// A deployment name of its own, so its reaper can never touch anyone else's sandboxes.
			"--env", "THREADBOX_DEPLOYMENT=imagetest-"+suffix,
			"--env", "THREADBOX_SANDBOX_PROVIDER=docker",
			"--env", "THREADBOX_SANDBOX_IMAGE="+sandboxImage,
			tag)
		require.NoError(t, err, out)

		// The probe compose.yaml runs: /readyz answers only once SQLite is open in the working
		// directory, which the non-root user must be able to write.
		probe := []string{"exec", name, "/usr/local/bin/healthcheck",
			"http://127.0.0.1:8080/healthz", "http://127.0.0.1:8080/readyz"}
		var last string
		if !assert.Eventually(t, func() bool {
			last, err = docker(t.Context(), probe...)
			return err == nil
		}, 60*time.Second, 200*time.Millisecond) {
			require.FailNow(t, "the container never became healthy", "last probe: %s\nlogs:\n%s", last, logs(t, name))
		}

		top, err := docker(t.Context(), "top", name, "-o", "pid,uid,gid,comm")
		require.NoError(t, err, top)
		procs := strings.Split(strings.TrimSpace(top), "\n")[1:]
		require.Len(t, procs, 1, "one process, the bot, and no shell:\n%s", top)
		fields := strings.Fields(procs[0])
		require.Equal(t, []string{"65532", "65532", "threadbox"}, fields[1:], "uid, gid and command of the bot")

		// The probe fails, with the reason, on a non-200 answer.
		out, err = docker(t.Context(), "exec", name, "/usr/local/bin/healthcheck", "http://127.0.0.1:8080/no-such-path")
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, out)
		require.Equal(t, 1, exit.ExitCode())
		require.Contains(t, out, "401 Unauthorized", "the web chat refuses a client without its token")
	})
}

// run runs a command and returns its combined output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

func docker(ctx context.Context, args ...string) (string, error) { return run(ctx, "docker", args...) }

// dockerErr is the error of a docker command, with its output, for RequireService.
func dockerErr(ctx context.Context, args ...string) error {
	if out, err := docker(ctx, args...); err != nil {
		return fmt.Errorf("docker %s: %w: %s", args[0], err, out)
	}
	return nil
}

// socketGroup is the group owning the Docker socket, which the image's user needs to reach it.
func socketGroup(t *testing.T) string {
	fi, err := os.Stat("/var/run/docker.sock")
	require.NoError(t, err, "the test mounts the local engine's socket into the container")
	st, ok := fi.Sys().(*syscall.Stat_t)
	require.True(t, ok)
	return strconv.FormatUint(uint64(st.Gid), 10)
}

func logs(t *testing.T, name string) string {
	out, err := docker(context.WithoutCancel(t.Context()), "logs", name)
	if err != nil {
		return "(docker logs: " + err.Error() + ")"
	}
	return out
}

// removeContainer and removeImage run at cleanup, when t's context is already cancelled.
func removeContainer(t *testing.T, name string) {
	out, err := docker(context.Background(), "rm", "--force", "--volumes", name)
	if err != nil && !strings.Contains(out, "No such container") {
		t.Errorf("docker rm %s: %v: %s", name, err, out)
	}
}

func removeImage(t *testing.T, tag string) {
	if out, err := docker(context.Background(), "rmi", "--force", tag); err != nil {
		t.Errorf("docker rmi %s: %v: %s", tag, err, out)
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
