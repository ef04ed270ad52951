package sandboxtest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// testFiles: round trips (10 MiB binary, unicode names, nested parents), ownership, and the refusals
// (symlinks, symlinked parents, oversized, missing, directories).
func (s *suite) testFiles(t *testing.T) {
	ctx := t.Context()
	h := s.create(t, s.spec(t))
	owner := func(path string) string {
		return s.ok(t, h, `stat -c %u:%g "$1"`, func(r *sandbox.ExecRequest) { r.Cmd = append(r.Cmd, "sh", path) })
	}

	t.Run("Binary10MiB", func(t *testing.T) {
		data := make([]byte, 10<<20)
		_, _ = rand.Read(data)
		require.NoError(t, s.p.WriteFile(ctx, h, "blob.bin", data, 0o600))
		sum := sha256.Sum256(data)
		require.Equal(t, hex.EncodeToString(sum[:])+"  blob.bin", s.ok(t, h, "sha256sum blob.bin"), "content as seen inside")
		require.Equal(t, "600", s.ok(t, h, "stat -c %a blob.bin"))
		if s.caps.Users {
			require.Equal(t, "1000:1000", owner("blob.bin"))
		}
		got, err := s.p.ReadFile(ctx, h, "blob.bin", 16<<20)
		require.NoError(t, err)
		require.True(t, bytes.Equal(data, got), "read back %d bytes, differ", len(got))

		_, err = s.p.ReadFile(ctx, h, "blob.bin", 1<<20)
		requireIs(t, err, sandbox.ErrFileTooLarge)
	})
	t.Run("UnicodeAndNested", func(t *testing.T) {
		names := []string{"résumé 📄.txt", "日本語/ファイル.md", "deep/a/b/c.txt", "sp ace/'quote\".txt"}
		for _, name := range names {
			require.NoError(t, s.p.WriteFile(ctx, h, name, []byte("content of "+name), 0o644), name)
		}
		for _, name := range names {
			got, err := s.p.ReadFile(ctx, h, name, 1024)
			require.NoError(t, err, name)
			require.Equal(t, "content of "+name, string(got))
			require.Equal(t, "content of "+name, s.ok(t, h, `cat "$1"`, func(r *sandbox.ExecRequest) { r.Cmd = append(r.Cmd, "sh", name) }))
		}
		if s.caps.Users {
			for _, dir := range []string{"日本語", "deep", "deep/a", "deep/a/b"} {
				require.Equal(t, "1000:1000", owner(dir), "created parent %s belongs to the user", dir)
			}
		}
		list, err := s.p.ListFiles(ctx, h, ".")
		require.NoError(t, err)
		byPath := map[string]sandbox.FileInfo{}
		for _, fi := range list {
			byPath[fi.Path] = fi
		}
		for _, name := range names {
			require.Contains(t, byPath, name)
			require.True(t, byPath[name].IsRegular(), name)
			require.Equal(t, int64(len("content of "+name)), byPath[name].Size, name)
		}
		require.True(t, byPath["deep/a"].Mode.IsDir())

		sub, err := s.p.ListFiles(ctx, h, "deep")
		require.NoError(t, err)
		require.Equal(t, []string{"a", "a/b", "a/b/c.txt"}, paths(sub), "paths are relative to the listed dir")
	})
	t.Run("OverwriteAbsoluteAndMode", func(t *testing.T) {
		abs := sandbox.DefaultWorkDir + "/run.sh"
		require.NoError(t, s.p.WriteFile(ctx, h, abs, []byte("#!/bin/sh\necho one\n"), 0o755))
		require.NoError(t, s.p.WriteFile(ctx, h, "run.sh", []byte("#!/bin/sh\necho two\n"), 0o755))
		require.Equal(t, "two", s.ok(t, h, "./run.sh"))
		require.NoError(t, s.p.WriteFile(ctx, h, "empty", nil, 0))
		got, err := s.p.ReadFile(ctx, h, "empty", 10)
		require.NoError(t, err)
		require.Empty(t, got)
		require.Equal(t, "644", s.ok(t, h, "stat -c %a empty"), "mode 0 means 0644")
	})
	t.Run("Refusals", func(t *testing.T) {
		s.ok(t, h, "mkdir -p realdir && echo inside > realdir/f && ln -s /etc/passwd link && ln -s /etc etclink && ln -s realdir dirlink")

		_, err := s.p.ReadFile(ctx, h, "link", 1<<20)
		requireIs(t, err, sandbox.ErrNotRegular, "a symlink to /etc/passwd is not read")
		_, err = s.p.ReadFile(ctx, h, "etclink/passwd", 1<<20)
		requireIs(t, err, sandbox.ErrNotRegular, "nor a file through a symlinked directory")
		_, err = s.p.ReadFile(ctx, h, "realdir", 1<<20)
		requireIs(t, err, sandbox.ErrNotRegular, "a directory is not a file")
		_, err = s.p.ListFiles(ctx, h, "dirlink")
		requireIs(t, err, sandbox.ErrNotRegular, "ListFiles does not follow a symlinked dir")
		err = s.p.WriteFile(ctx, h, "etclink/evil", []byte("x"), 0o644)
		require.Error(t, err, "writing through a symlinked directory")
		_, _, res := s.sh(t, h, "test -e /etc/evil")
		require.NotEqual(t, 0, res.ExitCode, "nothing was written to /etc")
		err = s.p.WriteFile(ctx, h, "realdir", []byte("x"), 0o644)
		require.Error(t, err, "a file does not replace a directory")
		require.Equal(t, "inside", s.ok(t, h, "cat realdir/f"))

		_, err = s.p.ReadFile(ctx, h, "no/such/file", 10)
		requireIs(t, err, fs.ErrNotExist)
		require.False(t, errors.Is(err, sandbox.ErrNotFound), "a missing path is not a missing sandbox: %v", err)
		_, err = s.p.ListFiles(ctx, h, "no-such-dir")
		requireIs(t, err, fs.ErrNotExist)

		list, err := s.p.ListFiles(ctx, h, ".")
		require.NoError(t, err)
		byPath := map[string]sandbox.FileInfo{}
		for _, fi := range list {
			require.False(t, strings.HasPrefix(fi.Path, "etclink/") || strings.HasPrefix(fi.Path, "dirlink/"),
				"ListFiles descended into a symlink: %s", fi.Path)
			byPath[fi.Path] = fi
		}
		for _, l := range []string{"link", "etclink", "dirlink"} {
			require.Contains(t, byPath, l)
			require.NotZero(t, byPath[l].Mode&fs.ModeSymlink, "%s is reported as a symlink", l)
			require.False(t, byPath[l].IsRegular(), l)
		}
	})
	t.Run("Caps", func(t *testing.T) {
		// Exactly MaxListEntries entries are listed; one more is refused, not buffered.
		s.ok(t, h, fmt.Sprintf("mkdir many && cd many && seq 1 %d | xargs touch", sandbox.MaxListEntries-1))
		list, err := s.p.ListFiles(ctx, h, "many")
		require.NoError(t, err)
		require.Len(t, list, sandbox.MaxListEntries-1)
		s.ok(t, h, "mkdir many/sub")
		list, err = s.p.ListFiles(ctx, h, "many")
		require.NoError(t, err)
		require.Len(t, list, sandbox.MaxListEntries, "directories count")
		s.ok(t, h, "touch many/sub/one-more")
		_, err = s.p.ListFiles(ctx, h, "many")
		requireIs(t, err, sandbox.ErrTooLarge)

		// No bound means DefaultMaxOutput, not the whole file (a sparse one here).
		s.ok(t, h, fmt.Sprintf("dd if=/dev/zero of=huge bs=1 count=0 seek=%d 2>/dev/null", sandbox.DefaultMaxOutput+1))
		_, err = s.p.ReadFile(ctx, h, "huge", 0)
		requireIs(t, err, sandbox.ErrFileTooLarge)
		requireIs(t, err, sandbox.ErrTooLarge, "a file too large is one case of too large")
		s.ok(t, h, "rm -rf many huge")
	})
}

// testDial: a TCP server started inside the sandbox (network none) is reached through the provider.
func (s *suite) testDial(t *testing.T) {
	d, ok := s.p.(sandbox.Dialer)
	if !ok {
		t.Skip("provider has no Dialer")
	}
	ctx := t.Context()
	h := s.create(t, s.spec(t))
	const port = 7777
	s.ok(t, h, fmt.Sprintf("nc -ll -p %d -e cat </dev/null >/dev/null 2>&1 &", port))

	echo := func(c net.Conn, msg string) (string, error) {
		if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return "", err
		}
		if _, err := io.WriteString(c, msg); err != nil {
			return "", err
		}
		buf := make([]byte, len(msg))
		_, err := io.ReadFull(c, buf)
		return string(buf), err
	}
	// The server starts in the background: retry until it answers.
	var conn net.Conn
	eventually(t, 20*time.Second, "echo server answers", func() (bool, string) {
		c, err := d.Dial(ctx, h, port)
		if err != nil {
			return false, err.Error()
		}
		got, err := echo(c, "ping\n")
		if err != nil || got != "ping\n" {
			_ = c.Close()
			return false, fmt.Sprintf("got %q, %v", got, err)
		}
		conn = c
		return true, ""
	})
	defer conn.Close()

	// A second connection through Bind, at the same time, with a payload bigger than any frame.
	c2, err := sandbox.Bind(s.p, h).Dial(ctx, port)
	require.NoError(t, err)
	defer c2.Close()
	payload := make([]byte, 1<<20)
	_, _ = rand.Read(payload)
	writeErr := make(chan error, 1)
	go func() {
		_, err := c2.Write(payload)
		writeErr <- err
	}()
	require.NoError(t, c2.SetReadDeadline(time.Now().Add(30*time.Second)))
	got := make([]byte, len(payload))
	_, err = io.ReadFull(c2, got)
	require.NoError(t, err)
	require.NoError(t, <-writeErr)
	require.True(t, bytes.Equal(payload, got), "1 MiB echoed intact")

	again, err := echo(conn, "still there\n")
	require.NoError(t, err)
	require.Equal(t, "still there\n", again, "the first connection is independent")

	// Nothing listens on another port: Dial or the first read fails, promptly.
	if c3, err := d.Dial(ctx, h, port+1); err == nil {
		_, err = echo(c3, "x")
		require.Error(t, err, "reading from a port nobody listens on")
		_ = c3.Close()
	}
}

func paths(list []sandbox.FileInfo) []string {
	out := make([]string, 0, len(list))
	for _, fi := range list {
		out = append(out, fi.Path)
	}
	return out
}
