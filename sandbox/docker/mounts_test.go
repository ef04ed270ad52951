package docker

import (
	"testing"

	"github.com/docker/docker/api/types/mount"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// TestContainerConfigMountsAndCommand: the spec's bind mounts follow the work volume, keeping their
// read-only flag, and a command replaces the image's entrypoint and command both.
func TestContainerConfigMountsAndCommand(t *testing.T) {
	tests := []struct {
		name       string
		spec       sandbox.Spec
		mounts     []mount.Mount
		entrypoint []string
		cmd        []string
	}{
		{name: "image command", spec: sandbox.Spec{WorkDir: "/w"},
			mounts: []mount.Mount{{Type: mount.TypeVolume, Source: "vol", Target: "/w"}}},
		{
			name: "gateway",
			spec: sandbox.Spec{WorkDir: "/w",
				Mounts:  []sandbox.Mount{{Source: "/host/gw/ab12", Target: "/run/threadbox", ReadOnly: true}, {Source: "/host/fwd", Target: "/opt/fwd"}},
				Command: []string{"/opt/fwd", "-listen", "127.0.0.1:1"}},
			mounts: []mount.Mount{
				{Type: mount.TypeVolume, Source: "vol", Target: "/w"},
				{Type: mount.TypeBind, Source: "/host/gw/ab12", Target: "/run/threadbox", ReadOnly: true},
				{Type: mount.TypeBind, Source: "/host/fwd", Target: "/opt/fwd"},
			},
			entrypoint: []string{"/opt/fwd"}, cmd: []string{"-listen", "127.0.0.1:1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, hc := containerConfig(tc.spec, "vol", nil)
			require.Equal(t, tc.mounts, hc.Mounts)
			require.Equal(t, tc.entrypoint, []string(cfg.Entrypoint))
			require.Equal(t, tc.cmd, []string(cfg.Cmd))
		})
	}
}
