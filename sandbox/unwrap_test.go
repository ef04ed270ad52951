package sandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

type wrapped struct{ sandbox.Provider }

func (w wrapped) Unwrap() sandbox.Provider { return w.Provider }

type pinging struct{ sandbox.Provider }

func (pinging) Ping(context.Context) error { return nil }

func TestAsWalksWrappers(t *testing.T) {
	inner := pinging{sandboxfake.New()}
	for name, p := range map[string]sandbox.Provider{
		"itself":        inner,
		"wrapped once":  wrapped{inner},
		"wrapped twice": wrapped{wrapped{inner}},
	} {
		_, ok := sandbox.As[sandbox.Pinger](p)
		require.True(t, ok, name)
	}
	_, ok := sandbox.As[sandbox.Pinger](wrapped{sandboxfake.New()})
	require.False(t, ok, "no provider in the chain pings")
	_, ok = sandbox.As[sandbox.Pinger](nil)
	require.False(t, ok)
}
