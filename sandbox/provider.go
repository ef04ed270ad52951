package sandbox

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"time"
)

// Provider creates and drives sandboxes. Every method takes ctx and may block on the network.
//
// Implementations must be safe for concurrent use. Methods that take a Handle must return an error
// wrapping ErrNotFound when the sandbox no longer exists, so that the caller can recreate it.
type Provider interface {
	// Name is the provider's config name ("docker", "local", …). It is stored in every Handle.
	Name() string
	// Capabilities declares what this provider enforces, so callers and the conformance suite know
	// what to expect instead of discovering it by failure.
	Capabilities() Capabilities

	// Create makes a new sandbox from spec and leaves it running. On failure it either wraps
	// ErrNoEffect (nothing was created: safe to retry) or leaves any partial sandbox labelled so that
	// the reaper can find it.
	Create(ctx context.Context, spec Spec) (Handle, error)
	// Inspect reports the sandbox's current state, or ErrNotFound.
	Inspect(ctx context.Context, h Handle) (Info, error)
	// Start resumes a stopped sandbox. Starting a running sandbox is a no-op.
	Start(ctx context.Context, h Handle) error
	// Stop pauses a sandbox, keeping its filesystem. Stopping a stopped sandbox is a no-op.
	Stop(ctx context.Context, h Handle) error
	// Destroy removes a sandbox and everything in it. It is idempotent: a missing sandbox is success.
	Destroy(ctx context.Context, h Handle) error
	// List returns the sandboxes carrying all of the given labels (the reaper passes the deployment).
	List(ctx context.Context, labels map[string]string) ([]Info, error)

	// Exec runs a command inside a running sandbox, streaming its output to req.Stdout/req.Stderr.
	// A command that outlives req.Timeout is killed and reported with ExitCode ExitTimeout.
	// A non-zero exit is a result, not an error; errors are for failing to run at all.
	Exec(ctx context.Context, h Handle, req ExecRequest) (ExecResult, error)

	// WriteFile creates or replaces a file, creating parent directories, owned by the sandbox user.
	// Relative paths are taken from the sandbox's working directory.
	WriteFile(ctx context.Context, h Handle, path string, data []byte, mode fs.FileMode) error
	// ReadFile reads a regular file, refusing (ErrFileTooLarge) one bigger than max bytes (max <= 0:
	// DefaultMaxOutput). It never follows a symlink: a symlink or other non-regular file is refused
	// with ErrNotRegular. A missing path wraps fs.ErrNotExist (not ErrNotFound, which means the
	// sandbox itself is gone).
	ReadFile(ctx context.Context, h Handle, path string, max int64) ([]byte, error)
	// ListFiles lists a directory tree (recursively, without following symlinks) relative to dir.
	// Symlinks are reported as symlinks (lstat), never descended into; dir itself being a symlink
	// is refused with ErrNotRegular. A tree of more than MaxListEntries entries is refused with
	// ErrTooLarge, having kept no more than that in memory.
	ListFiles(ctx context.Context, h Handle, dir string) ([]FileInfo, error)
}

// Dialer is an optional capability: reach a TCP port inside the sandbox. It must work without any
// network between host and sandbox (network mode none), because the runtimes rely on it.
type Dialer interface {
	Dial(ctx context.Context, h Handle, port int) (net.Conn, error)
}

// Pinger is an optional capability: check that the sandbox service answers (readiness probes). An
// outage wraps ErrUnavailable.
type Pinger interface {
	Ping(ctx context.Context) error
}

// VolumeReaper is an optional capability for providers whose sandboxes keep their files in volumes
// that can outlive the sandbox (Docker: a container removed out of band with docker rm -f leaves its
// work volume). The reaper lists the volumes carrying labels and removes those no live sandbox uses.
type VolumeReaper interface {
	// ListVolumes returns the volumes carrying all of the given labels.
	ListVolumes(ctx context.Context, labels map[string]string) ([]Volume, error)
	// RemoveVolume removes a volume; a missing one is success. A volume still in use is refused.
	RemoveVolume(ctx context.Context, name string) error
}

// Volume is a provider-managed volume.
type Volume struct {
	Name   string
	Labels map[string]string
	// CreatedAt is zero when the provider does not report it.
	CreatedAt time.Time
	// InUse: some sandbox (in any state) still mounts it.
	InUse bool
}

// StatsReader is an optional capability: current resource use.
type StatsReader interface {
	Stats(ctx context.Context, h Handle) (Stats, error)
}

// Attacher is an optional capability: the command an operator runs on a machine that can reach the
// provider to get an interactive shell in the sandbox, as its user and in its working directory
// (`docker exec -it …`). shell is appended as the command to run. It never opens the shell itself.
type Attacher interface {
	AttachCommand(ctx context.Context, h Handle, shell string) ([]string, error)
}

// Snapshotter is an optional capability: save the sandbox's filesystem under a name.
type Snapshotter interface {
	Snapshot(ctx context.Context, h Handle, name string) (string, error)
}

// Capabilities says what a provider enforces. The conformance suite skips the checks a provider
// declares it cannot meet, and the bot refuses configs that ask for something unsupported.
type Capabilities struct {
	// Isolated is false for the local (host process) provider.
	Isolated bool
	// Limits: memory, cpus and pids limits are enforced.
	Limits bool
	// NetworkNone: network mode none leaves only loopback inside.
	NetworkNone bool
	// Users: commands run as the spec's non-root user.
	Users bool
	// ReadOnlyRoot: the root filesystem can be mounted read-only.
	ReadOnlyRoot bool
	// OutOfBand: the provider's sandboxes can be removed or stopped behind its back (docker rm -f);
	// the suite uses this to test healing.
	OutOfBand bool
}

// Handle is what Threadbox stores to find a sandbox again. It is saved as JSON in the session row.
type Handle struct {
	Provider string `json:"provider"`
	ID       string `json:"id"`
	// Version lets a provider change the shape of State without breaking stored handles.
	Version int `json:"version,omitempty"`
	// State is the provider's private data (for example a Deno volume id). Opaque to everyone else.
	State json.RawMessage `json:"state,omitempty"`
}

// IsZero reports whether the handle points at nothing.
func (h Handle) IsZero() bool { return h.ID == "" }

// State is a sandbox's lifecycle state as the provider sees it.
type State string

const (
	StateRunning  State = "running"
	StateStopped  State = "stopped"
	StateArchived State = "archived"
	// StateStarting covers creating and resuming: wait, don't recreate.
	StateStarting State = "starting"
	// StateFailed: the provider reports the sandbox as broken; the resolver destroys and recreates.
	StateFailed State = "failed"
)

// Info describes one sandbox.
type Info struct {
	Handle    Handle
	State     State
	Labels    map[string]string
	Image     string
	CreatedAt time.Time
	// Limits as the provider applied them, where it can report them (zero when unknown).
	Resources Resources
	User      string
	Network   NetworkMode
}

// NetworkMode is a sandbox's network policy.
type NetworkMode string

const (
	// NetworkNone: loopback only. The default, and what every test uses.
	NetworkNone NetworkMode = "none"
	// NetworkFull: the provider's outbound network (Docker: a bridge network of the deployment's own,
	// inter-container traffic off). Opt-in. Restricted egress is not a provider mode: it is network
	// none plus the bot's egress proxy (agentpool/egress).
	NetworkFull NetworkMode = "full"
)

// ExitTimeout is the exit code reported for a command killed by its timeout, as coreutils timeout(1).
const ExitTimeout = 124

// ExecRequest is one command to run.
type ExecRequest struct {
	// Cmd is the argv; it is not interpreted by a shell unless it says so (["bash","-lc", …]).
	Cmd []string
	// Dir defaults to the sandbox's working directory.
	Dir string
	// Env is added to the sandbox's environment for this command only. Model keys travel here, never
	// in Spec.Env (see DESIGN §7).
	Env map[string]string
	// User defaults to the sandbox's user.
	User string
	// Timeout kills the command after this long (0: no limit beyond ctx).
	Timeout time.Duration
	// Stdin, when set, is copied to the command's standard input, which is then closed. It is read
	// only for a command that started or is about to start, never by an Exec that fails because the
	// sandbox is stopped or gone: the runtimes take a read as "the command may have got its input"
	// (a prompt, the shell's start line), after which they do not run it again on their own.
	Stdin io.Reader
	// Stdout and Stderr receive the streams as they arrive; nil discards.
	Stdout, Stderr io.Writer
	// MaxOutput bounds the bytes delivered per stream (0: DefaultMaxOutput). Output beyond it is
	// dropped and ExecResult.Truncated is set; the command keeps running.
	MaxOutput int64
}

// DefaultMaxOutput bounds each exec stream when the request sets no bound, and ReadFile when the
// caller passes no bound.
const DefaultMaxOutput = 16 << 20

// MaxListEntries bounds one ListFiles answer. The agent decides how many files it writes; the only
// caller lists output/display, of which it checks at most a thousand files anyway.
const MaxListEntries = 10_000

// ExecResult is how a command ended.
type ExecResult struct {
	ExitCode  int
	TimedOut  bool
	Truncated bool
	Duration  time.Duration
}

// FileInfo describes one entry below a listed directory.
type FileInfo struct {
	// Path is relative to the listed directory, with forward slashes.
	Path    string
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
}

// IsRegular reports whether the entry is a plain file (not a directory, symlink or device).
func (f FileInfo) IsRegular() bool { return f.Mode.IsRegular() }

// Stats is a point-in-time resource reading. The byte counters are totals since the sandbox started
// (zero where the provider does not report them).
type Stats struct {
	CPUPercent  float64
	MemoryBytes uint64
	MemoryLimit uint64
	PIDs        uint64
	// NetRxBytes and NetTxBytes are network traffic in and out (zero with network none).
	NetRxBytes, NetTxBytes uint64
	// BlockReadBytes and BlockWriteBytes are disk I/O.
	BlockReadBytes, BlockWriteBytes uint64
}
