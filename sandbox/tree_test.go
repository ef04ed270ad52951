package sandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// treeReading answers every ReadTree with one file, so a test can tell it was reached.
type treeReading struct{ sandbox.Provider }

func (treeReading) ReadTree(_ context.Context, h sandbox.Handle, dir string, lim sandbox.TreeLimits) (sandbox.Tree, error) {
	return sandbox.Tree{Files: []sandbox.TreeFile{{FileInfo: sandbox.FileInfo{Path: h.ID + ":" + dir}}}}, nil
}

// A bound sandbox reaches ReadTree through wrappers (the gateway's and egress' socket sets wrap
// every provider and pass only Dial, Stats and Snapshot through), and says ErrUnsupported when no
// provider in the chain has it, so that the caller lists and reads instead.
func TestBoundReadTree(t *testing.T) {
	h := sandbox.Handle{Provider: "fake", ID: "sb1"}
	for _, tc := range []struct {
		name string
		p    sandbox.Provider
		want string
	}{
		{"provider has it", treeReading{sandboxfake.New()}, "sb1:out"},
		{"behind a wrapper", wrapped{treeReading{sandboxfake.New()}}, "sb1:out"},
		{"nowhere in the chain", wrapped{sandboxfake.New()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := sandbox.Bind(tc.p, h).ReadTree(t.Context(), "out", sandbox.TreeLimits{})
			if tc.want == "" {
				require.ErrorIs(t, err, sandbox.ErrUnsupported)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, tree.Files[0].Path)
		})
	}
}

func TestTreeLimitsDefaults(t *testing.T) {
	require.Equal(t, sandbox.TreeLimits{MaxFileBytes: sandbox.DefaultMaxOutput, MaxTotalBytes: 4 * sandbox.DefaultMaxOutput,
		MaxSkipBytes: sandbox.DefaultMaxTreeSkip, MaxPassBytes: sandbox.DefaultMaxTreePass}, sandbox.TreeLimits{MaxFileBytes: -1}.WithDefaults())
	set := sandbox.TreeLimits{MaxFileBytes: 1, MaxTotalBytes: 2, MaxSkipBytes: 3, MaxPassBytes: 4}
	require.Equal(t, set, set.WithDefaults())
}
