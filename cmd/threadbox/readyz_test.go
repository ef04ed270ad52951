package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

type pingingProvider struct {
	*sandboxfake.Provider
	err error
}

func (p pingingProvider) Ping(context.Context) error { return p.err }

func TestReadyzProviderStatus(t *testing.T) {
	tests := []struct {
		name string
		prov sandbox.Provider
		want string
	}{
		{"no ping capability", sandboxfake.New(), "provider fake: ok"},
		{"answers", pingingProvider{Provider: sandboxfake.New()}, "provider fake: ok"},
		{"outage, without the daemon's text", pingingProvider{Provider: sandboxfake.New(),
			err: fmt.Errorf("docker ping: %w: Cannot connect to the Docker daemon at unix:///var/run/docker.sock", sandbox.ErrUnavailable)},
			"provider fake: unavailable (turns wait for it)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, providerStatus(t.Context(), tc.prov, zap.NewNop()))
		})
	}
}
