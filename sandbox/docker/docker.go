// Package docker is the sandbox provider backed by a Docker engine, local or remote (DOCKER_HOST).
//
// A sandbox is one container plus one named volume mounted at the work directory, both labelled with
// the sandbox's labels. Everything else (exec, files, port access) goes through the Docker API only,
// so the provider works the same against a remote engine and with network mode none.
//
// What the sandbox image must contain (the FROM-scratch busybox test image and the Debian base both do):
//
//   - /bin/sh and grep with -z (busybox, GNU): an exec that times out or whose ctx ends is killed from
//     inside the container by further execs (see killTagged in exec.go);
//   - nc (busybox or netcat), socat, or bash: Dial pipes the exec's stdio to 127.0.0.1:port (see dial.go).
//
// Docker SDK types never leave this package; errors are mapped to the sandbox sentinels at the
// boundary and carry the daemon's message as text.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// Name is the provider's config name, stored in every Handle.
const Name = "docker"

// handleVersion is the shape of handleState below; bump it when the shape changes incompatibly.
const handleVersion = 1

// Options configures a Provider. The zero value talks to the daemon named by the DOCKER_* environment.
type Options struct {
	// Host overrides DOCKER_HOST ("unix:///var/run/docker.sock", "tcp://10.0.0.5:2376").
	Host string
	// Deployment, when set, fences the provider to one deployment: Create refuses (or fills in) other
	// deployment labels and List only ever returns this deployment's sandboxes, so a misconfigured
	// reaper cannot touch a neighbour's containers on a shared engine.
	Deployment string
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL (default 5 s).
	StopTimeout time.Duration
	// Logger receives best-effort cleanup failures (default: no logging).
	Logger *zap.Logger
}

// Provider implements sandbox.Provider on a Docker engine. It is safe for concurrent use.
type Provider struct {
	cli         *client.Client
	deployment  string
	stopTimeout time.Duration
	log         *zap.Logger
	cpu         cpuSamples
	facts       imageFacts
	quota       quotaFacts
	net         networks
}

var (
	_ sandbox.Provider    = (*Provider)(nil)
	_ sandbox.Dialer      = (*Provider)(nil)
	_ sandbox.StatsReader = (*Provider)(nil)
)

// New connects to the engine and checks that it answers, negotiating the API version (the engine
// may be older than this client).
func New(ctx context.Context, opts Options) (*Provider, error) {
	copts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if opts.Host != "" {
		copts = append(copts, client.WithHost(opts.Host))
	}
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker daemon at %s does not answer (start dockerd or fix DOCKER_HOST): %s",
			cli.DaemonHost(), err)
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	p := &Provider{
		cli:         cli,
		deployment:  opts.Deployment,
		stopTimeout: opts.StopTimeout,
		log:         opts.Logger.Named("sandbox.docker"),
		cpu:         cpuSamples{last: map[string]cpuSample{}},
	}
	p.probeStorageQuota(ctx)
	return p, nil
}

var _ sandbox.Pinger = (*Provider)(nil)

// Ping implements sandbox.Pinger: the daemon answers /_ping.
func (p *Provider) Ping(ctx context.Context) error {
	_, err := p.cli.Ping(ctx)
	return wrapErr("ping", err)
}

// Close releases the client's connections. Sandboxes are left as they are.
func (p *Provider) Close() error { return p.cli.Close() }

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements sandbox.Provider: Docker enforces everything the suite checks.
func (p *Provider) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Isolated: true, Limits: true, NetworkNone: true, Users: true, ReadOnlyRoot: true, OutOfBand: true,
	}
}

// CheckImage reports, with a fix, when image is not present on the engine (there is no registry to
// pull from, so a missing image is a setup problem, not something to retry). doctor and tests use it.
func (p *Provider) CheckImage(ctx context.Context, image string) error {
	if _, err := p.cli.ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("image %s is not on the docker engine (nothing is pulled): build it, e.g. make sandbox-image: %w",
				image, sandbox.ErrInvalidSpec)
		}
		return wrapErr("inspect image "+image, err)
	}
	return nil
}

// handleState is the provider's private part of a Handle. Every field can be recomputed from the
// container (see meta), so a handle from List, or a stored handle of an older shape, still works.
type handleState struct {
	Volume       string `json:"volume,omitempty"`
	User         string `json:"user,omitempty"`
	UID          int    `json:"uid"`
	GID          int    `json:"gid"`
	WorkDir      string `json:"workdir,omitempty"`
	ReadOnlyRoot bool   `json:"read_only_root,omitempty"`
	// Network is the deployment's full network the container is on (NetworkName), "" for none.
	Network string `json:"network,omitempty"`
}

// complete reports whether the state can be used without asking the daemon.
func (s handleState) complete() bool { return s.WorkDir != "" && s.User != "" }

func newHandle(id string, st handleState) sandbox.Handle {
	return sandbox.NewHandle(Name, id, handleVersion, st)
}

// decodeHandle checks that h is ours and returns its state (possibly incomplete).
func decodeHandle(h sandbox.Handle) (handleState, error) {
	var st handleState
	err := h.DecodeState(Name, handleVersion, &st)
	return st, err
}

// wrapErr maps a Docker error to the sandbox sentinels. The daemon's error is kept as text only, so
// no Docker type escapes through errors.As; context errors stay matchable.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var sentinel error
	switch {
	case errors.Is(err, context.Canceled):
		sentinel = context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		sentinel = context.DeadlineExceeded
	case client.IsErrConnectionFailed(err) && neverSent(err):
		// The client could not connect, so the request was never sent: the daemon is down or
		// restarting, and whatever we asked surely did not happen.
		return fmt.Errorf("docker %s: %w: %w: %s", op, sandbox.ErrUnavailable, sandbox.ErrNoEffect, err)
	case client.IsErrConnectionFailed(err):
		// The client names every failed round trip a connection failure, also a connection cut
		// after the request went out: the daemon may have acted.
		sentinel = sandbox.ErrUnavailable
	case isDaemonGone(err):
		// The daemon went away mid-request (a restart): it may have acted, so no ErrNoEffect.
		sentinel = sandbox.ErrUnavailable
	case cerrdefs.IsNotFound(err), isBeingRemoved(err):
		// A container the daemon is removing is as good as gone (its removal cannot be undone).
		sentinel = sandbox.ErrNotFound
	case cerrdefs.IsConflict(err) && isNotRunningMsg(err.Error()):
		sentinel = sandbox.ErrNotRunning
	case cerrdefs.IsInvalidArgument(err):
		sentinel = sandbox.ErrInvalidSpec
	default:
		return fmt.Errorf("docker %s: %s", op, err)
	}
	return fmt.Errorf("docker %s: %w: %s", op, sentinel, err)
}

// neverSent reports whether a failed round trip failed while dialing, before any byte of the request
// was written. The client reports refused and missing sockets with its own message and no cause.
func neverSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op == "dial"
	}
	return strings.Contains(err.Error(), "Cannot connect to the Docker daemon")
}

// isDaemonGone reports a connection to the daemon that broke or was refused mid-request, or a daemon
// that says it is unavailable: a daemon restart, not an answer about the sandbox.
func isDaemonGone(err error) bool {
	return cerrdefs.IsUnavailable(err) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func isNotRunningMsg(msg string) bool {
	return strings.Contains(msg, "is not running") || strings.Contains(msg, "is paused") ||
		strings.Contains(msg, "is restarting")
}

// isBeingRemoved: the daemon refuses to start or remove a container another request is removing
// ("removal of container … is already in progress", "container is marked for removal and cannot be
// started"), both 409.
func isBeingRemoved(err error) bool {
	if err == nil || !cerrdefs.IsConflict(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "already in progress") || strings.Contains(msg, "marked for removal")
}

// cleanupCtx is for best-effort cleanup that must run even when the caller's ctx has ended (the
// "kill the task" context, apart from the caller's "we are giving up" one).
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
}
