package deno

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/internal/shellfs"
)

// File operations keep the Docker provider's rules: no path component below the work directory (or
// below /, outside it) may be a symlink, a read never follows one, and reads are bounded. Deno's
// readFile and writeFile follow symlinks, so every operation first checks the path with a short
// script run with spawn (the same scripts as the Daytona provider's); the bytes then travel through
// readFile and writeFile.

// walkScript is sourced by the file scripts: it walks from $top down to $d, refusing a symlink or a
// The file scripts and their parsing are shellfs's, shared with the other shell-only providers.
var writeScript = shellfs.WriteScript("")

// WriteFile implements sandbox.Provider: writeFile to a temporary file, then move it into place after
// the parent checks (missing parents are created).
func (p *Provider) WriteFile(ctx context.Context, h sandbox.Handle, name string, data []byte, mode fs.FileMode) error {
	lv, st, err := p.liveFor(ctx, h)
	if err != nil {
		return err
	}
	abs, err := shellfs.Resolve(st.WorkDir, name)
	if err != nil {
		return err
	}
	if mode.Perm() == 0 {
		mode = 0o644
	}
	tmp := "/tmp/.threadbox-upload-" + strings.ToLower(randomID())
	params := map[string]any{"path": tmp, "options": map[string]any{"create": true, "mode": 0o600}, "content": base64.StdEncoding.EncodeToString(data)}
	if err := lv.conn.call(ctx, "writeFile", params, nil, nil); err != nil {
		return p.lost(ctx, h, fmt.Errorf("deno: write %s: %w", abs, err))
	}
	res, err := p.run(ctx, lv, writeScript, tmp, abs, strconv.FormatUint(uint64(mode.Perm()), 8), shellfs.Top(st.WorkDir, abs))
	return shellfs.ScriptErr("deno", "write", abs, res.out, res.code, p.lost(ctx, h, err))
}

// ReadFile implements sandbox.Provider.
func (p *Provider) ReadFile(ctx context.Context, h sandbox.Handle, name string, max int64) ([]byte, error) {
	lv, st, err := p.liveFor(ctx, h)
	if err != nil {
		return nil, err
	}
	abs, err := shellfs.Resolve(st.WorkDir, name)
	if err != nil {
		return nil, err
	}
	if max <= 0 {
		max = sandbox.DefaultMaxOutput
	}
	// One script checks the file and reads at most max+1 bytes of it through the output stream, so
	// a file that grew since the check costs no more than max (Deno's readFile would bring it whole,
	// in one message, and past the socket's limit that closes the box's shared socket).
	data, errOut, code, err := p.runOut(ctx, lv, max, readScript, abs, shellfs.Top(st.WorkDir, abs), strconv.FormatInt(max, 10), strconv.FormatInt(max+1, 10))
	if errors.Is(err, sandbox.ErrTooLarge) {
		return nil, fmt.Errorf("deno: read %s: more than %d bytes: %w", abs, max, sandbox.ErrFileTooLarge)
	}
	if err := shellfs.ScriptErr("deno", "read", abs, errOut, code, p.lost(ctx, h, err)); err != nil {
		return nil, err
	}
	return []byte(data), nil
}

// readScript is the read check with its messages on stderr, then the bounded read ($4 bytes) on
// stdout.
const readScript = "exec 3>&1 1>&2\n" + shellfs.ReadScript + "\nexec head -c \"$4\" -- \"$f\" >&3"

// ListFiles implements sandbox.Provider.
func (p *Provider) ListFiles(ctx context.Context, h sandbox.Handle, dir string) ([]sandbox.FileInfo, error) {
	lv, st, err := p.liveFor(ctx, h)
	if err != nil {
		return nil, err
	}
	abs, err := shellfs.Resolve(st.WorkDir, dir)
	if err != nil {
		return nil, err
	}
	// Each line is at most a few hundred bytes: this bounds the answer well past MaxListEntries lines.
	out, errOut, code, err := p.runOut(ctx, lv, shellfs.ListBytes, shellfs.ListScript, abs, shellfs.Top(st.WorkDir, abs))
	if errors.Is(err, sandbox.ErrTooLarge) {
		return nil, shellfs.TooMany("deno", abs)
	}
	if err := shellfs.ScriptErr("deno", "list", abs, out+errOut, code, p.lost(ctx, h, err)); err != nil {
		return nil, err
	}
	return shellfs.ParseList("deno", abs, out)
}

func randomID() string { return rand.Text()[:16] }
