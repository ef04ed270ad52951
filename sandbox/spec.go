package sandbox

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// Spec is everything a provider needs to create a sandbox.
type Spec struct {
	Image  string
	Labels Labels
	// Env is the create-time environment, already filtered by an EnvPolicy. Providers still drop
	// anything BlockedEnv matches (defence in depth: blocked always wins).
	Env        map[string]string
	BlockedEnv []string
	Resources  Resources
	Network    NetworkMode
	// User is "uid:gid" or a name; empty means DefaultUser. Root is refused unless AllowRoot.
	User      string
	AllowRoot bool
	// WorkDir is the agent's working directory, created and owned by User.
	WorkDir string
	// ReadOnlyRoot mounts / read-only with tmpfs /tmp; WorkDir stays writable.
	ReadOnlyRoot bool
	// Mounts bind host paths into the sandbox (the model gateway's socket directory and forwarder).
	// A provider that cannot bind host paths refuses a Spec with mounts (ErrUnsupported).
	Mounts []Mount
	// Command replaces the image's command: the sandbox's main process, which runs as User and lives as
	// long as the sandbox runs (Stop ends it, Start runs it again). Empty: the image's command.
	Command []string
}

// Mount binds a path of the provider's host into the sandbox.
type Mount struct {
	// Source is an absolute path on the host the provider runs sandboxes on (for Docker, the daemon's).
	Source string
	// Target is the absolute path inside the sandbox.
	Target   string
	ReadOnly bool
}

// Defaults for a Spec's empty fields.
const (
	DefaultUser    = "1000:1000"
	DefaultWorkDir = "/workspace"
)

// Resources bounds what a sandbox may use. Zero fields mean "provider default" only where noted.
type Resources struct {
	MemoryMB int     `json:"memory_mb" koanf:"memory_mb"`
	CPUs     float64 `json:"cpus" koanf:"cpus"`
	PIDs     int     `json:"pids" koanf:"pids"`
	DiskMB   int     `json:"disk_mb" koanf:"disk_mb"`
	// TmpMB sizes the /tmp tmpfs of a read-only root (it counts against MemoryMB); 0: the default.
	TmpMB int `json:"tmp_mb" koanf:"tmp_mb"`
	// ExecTimeout is the default per-exec timeout for agent commands.
	ExecTimeout time.Duration `json:"exec_timeout" koanf:"exec_timeout"`
}

// Ranges accepted for Resources (after seed 002's schema). Exported so config validation and docs
// quote the same numbers.
var (
	MemoryMBRange    = [2]int{512, 32768}
	CPUsRange        = [2]float64{0.5, 16}
	PIDsRange        = [2]int{32, 4096}
	DiskMBRange      = [2]int{1024, 102400}
	TmpMBRange       = [2]int{16, 16384}
	ExecTimeoutRange = [2]time.Duration{time.Second, 24 * time.Hour}
)

// DefaultTmpMB is /tmp's size when Resources.TmpMB is 0 (seed 002's 512m).
const DefaultTmpMB = 512

// DefaultResources are the limits used when nothing is configured.
func DefaultResources() Resources {
	return Resources{MemoryMB: 4096, CPUs: 2, PIDs: 256, DiskMB: 10240, TmpMB: DefaultTmpMB, ExecTimeout: time.Hour}
}

// Validate checks every field against its range. field(name) renders the key in the caller's terms
// (for example "sandbox.resources.memory_mb"), so the message names what the user must change.
func (r Resources) Validate(field func(string) string) error {
	if field == nil {
		field = func(s string) string { return s }
	}
	switch {
	case r.MemoryMB < MemoryMBRange[0] || r.MemoryMB > MemoryMBRange[1]:
		return fmt.Errorf("%s = %d: must be between %d and %d (MB)", field("memory_mb"), r.MemoryMB, MemoryMBRange[0], MemoryMBRange[1])
	case !(r.CPUs >= CPUsRange[0] && r.CPUs <= CPUsRange[1]): // also NaN, which fails every comparison
		return fmt.Errorf("%s = %g: must be between %g and %g", field("cpus"), r.CPUs, CPUsRange[0], CPUsRange[1])
	case r.PIDs < PIDsRange[0] || r.PIDs > PIDsRange[1]:
		return fmt.Errorf("%s = %d: must be between %d and %d", field("pids"), r.PIDs, PIDsRange[0], PIDsRange[1])
	case r.DiskMB != 0 && (r.DiskMB < DiskMBRange[0] || r.DiskMB > DiskMBRange[1]):
		return fmt.Errorf("%s = %d: must be 0 (provider default) or between %d and %d (MB)", field("disk_mb"), r.DiskMB, DiskMBRange[0], DiskMBRange[1])
	case r.TmpMB != 0 && (r.TmpMB < TmpMBRange[0] || r.TmpMB > TmpMBRange[1] || r.TmpMB > r.MemoryMB):
		return fmt.Errorf("%s = %d: must be 0 (default %d) or between %d and %d (MB), and at most memory_mb (tmpfs counts against it)",
			field("tmp_mb"), r.TmpMB, DefaultTmpMB, TmpMBRange[0], TmpMBRange[1])
	case r.ExecTimeout < ExecTimeoutRange[0] || r.ExecTimeout > ExecTimeoutRange[1]:
		return fmt.Errorf("%s = %s: must be between %s and %s", field("exec_timeout"), r.ExecTimeout, ExecTimeoutRange[0], ExecTimeoutRange[1])
	}
	return nil
}

// ParseNetworkMode accepts the config spellings.
func ParseNetworkMode(s string) (NetworkMode, error) {
	switch NetworkMode(s) {
	case NetworkNone, "":
		return NetworkNone, nil
	case NetworkFull:
		return NetworkFull, nil
	}
	return "", fmt.Errorf("network mode %q: must be %q or %q", s, NetworkNone, NetworkFull)
}

// Normalize fills defaults, drops blocked variables from Env, and validates. Every provider calls it
// at the top of Create, so a hand-built Spec gets the same guarantees as one built from config.
func (s Spec) Normalize() (Spec, error) {
	if s.Image == "" {
		return s, fmt.Errorf("%w: image is required", ErrInvalidSpec)
	}
	if err := s.Labels.Validate(); err != nil {
		return s, err
	}
	if s.User == "" {
		s.User = DefaultUser
	}
	if !s.AllowRoot && isRootUser(s.User) {
		return s, fmt.Errorf("%w: user %q is root; sandboxes run as a non-root user", ErrInvalidSpec, s.User)
	}
	if s.WorkDir == "" {
		s.WorkDir = DefaultWorkDir
	}
	if !path.IsAbs(s.WorkDir) {
		return s, fmt.Errorf("%w: workdir %q must be absolute", ErrInvalidSpec, s.WorkDir)
	}
	for _, m := range s.Mounts {
		if !path.IsAbs(m.Source) || !path.IsAbs(m.Target) {
			return s, fmt.Errorf("%w: mount %q → %q: both paths must be absolute", ErrInvalidSpec, m.Source, m.Target)
		}
	}
	mode, err := ParseNetworkMode(string(s.Network))
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	s.Network = mode
	if s.Resources == (Resources{}) {
		s.Resources = DefaultResources()
	}
	if err := s.Resources.Validate(nil); err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if s.Resources.TmpMB == 0 {
		s.Resources.TmpMB = min(DefaultTmpMB, s.Resources.MemoryMB)
	}
	blocked := NewMatcher(append(DefaultBlocked(), s.BlockedEnv...))
	env := make(map[string]string, len(s.Env))
	for k, v := range s.Env {
		if err := ValidateEnvName(k); err != nil {
			return s, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
		if !blocked.Match(k) {
			env[k] = v
		}
	}
	s.Env = env
	return s, nil
}

func isRootUser(u string) bool {
	name, _, _ := strings.Cut(u, ":")
	return name == "root" || name == "0"
}
