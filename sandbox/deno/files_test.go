package deno_test

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// TestReadFileBoundedRead: the bounded read on a real sandbox: exactly max bytes (binary) come back
// whole, one more is ErrFileTooLarge, a missing file is fs.ErrNotExist and a directory is refused.
func TestReadFileBoundedRead(t *testing.T) {
	f := newFake(t, nil)
	p := newProvider(t, f, nil)
	ctx := t.Context()
	h := create(t, p, spec(t, "deno-readbound"))
	data := []byte{0, 1, 2, 0xff, '\n', 'x', 0, 7}
	require.NoError(t, p.WriteFile(ctx, h, "bin/data", data, 0o644))

	got, err := p.ReadFile(ctx, h, "bin/data", int64(len(data)))
	require.NoError(t, err)
	require.Equal(t, data, got)
	_, err = p.ReadFile(ctx, h, "bin/data", int64(len(data)-1))
	require.ErrorIs(t, err, sandbox.ErrFileTooLarge)
	_, err = p.ReadFile(ctx, h, "bin/missing", 100)
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = p.ReadFile(ctx, h, "bin", 100)
	require.ErrorIs(t, err, sandbox.ErrNotRegular)
}
