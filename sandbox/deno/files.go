package deno

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// File operations keep the Docker provider's rules: no path component below the work directory (or
// below /, outside it) may be a symlink, a read never follows one, and reads are bounded. Deno's
// readFile and writeFile follow symlinks, so every operation first checks the path with a short
// script run with spawn (the same scripts as the Daytona provider's); the bytes then travel through
// readFile and writeFile.

// walkScript is sourced by the file scripts: it walks from $top down to $d, refusing a symlink or a
// non-directory on the way (exit 3) and a missing directory (exit 2), unless $mk says to create it.
const walkScript = `walk() {
  set -f; p=$top; rel=${d#"$top"}; IFS=/
  for c in $rel; do
    [ -n "$c" ] || continue
    p="$p/$c"
    if [ -L "$p" ]; then echo "$p is a symlink; symlinks are never followed"; exit 3; fi
    if [ ! -e "$p" ]; then
      [ -n "$mk" ] || { echo "$p: no such directory"; exit 2; }
      mkdir "$p" || exit 1
    elif [ ! -d "$p" ]; then echo "$p: not a directory"; exit 3; fi
  done
  unset IFS; set +f
}
`

// writeScript moves an uploaded temporary file ($1) into place ($2) with mode $3.
const writeScript = walkScript + `src=$1 dst=$2 mode=$3 top=$4 mk=1 d=${2%/*}
trap 'rm -f "$src"' EXIT
walk
if [ -L "$dst" ] || [ -d "$dst" ]; then echo "$dst: not a regular file"; exit 3; fi
mv -f "$src" "$dst" && chmod "$mode" "$dst"`

// readScript checks that $1 is a regular file of at most $3 bytes.
const readScript = walkScript + `f=$1 top=$2 max=$3 mk= d=${1%/*}
walk
if [ -L "$f" ]; then echo "$f is a symlink; symlinks are never followed"; exit 3; fi
[ -e "$f" ] || { echo "$f: no such file"; exit 2; }
[ -f "$f" ] || { echo "$f: not a regular file"; exit 3; }
s=$(stat -c %s "$f") || exit 1
[ "$s" -le "$max" ] || { echo "$s bytes"; exit 4; }`

// listScript lists the tree below $1 without following symlinks: raw mode (hex), size, mtime, path.
const listScript = walkScript + `dir=$1 top=$2 mk= d=${1%/*}
walk
if [ -L "$dir" ]; then echo "$dir is a symlink; symlinks are never followed"; exit 3; fi
[ -e "$dir" ] || { echo "$dir: no such directory"; exit 2; }
[ -d "$dir" ] || { echo "$dir: not a directory"; exit 3; }
cd "$dir" && find . ! -name . -exec stat -c '%f %s %Y %n' {} + 2>/dev/null`

// WriteFile implements sandbox.Provider: writeFile to a temporary file, then move it into place after
// the parent checks (missing parents are created).
func (p *Provider) WriteFile(ctx context.Context, h sandbox.Handle, name string, data []byte, mode fs.FileMode) error {
	lv, st, err := p.liveFor(ctx, h)
	if err != nil {
		return err
	}
	abs, err := resolve(st, name)
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
	res, err := p.run(ctx, lv, writeScript, tmp, abs, strconv.FormatUint(uint64(mode.Perm()), 8), top(st, abs))
	return scriptErr("write", abs, res.out, res.code, p.lost(ctx, h, err))
}

// ReadFile implements sandbox.Provider.
func (p *Provider) ReadFile(ctx context.Context, h sandbox.Handle, name string, max int64) ([]byte, error) {
	lv, st, err := p.liveFor(ctx, h)
	if err != nil {
		return nil, err
	}
	abs, err := resolve(st, name)
	if err != nil {
		return nil, err
	}
	if max <= 0 {
		max = sandbox.DefaultMaxOutput
	}
	res, err := p.run(ctx, lv, readScript, abs, top(st, abs), strconv.FormatInt(max, 10))
	if err := scriptErr("read", abs, res.out, res.code, p.lost(ctx, h, err)); err != nil {
		return nil, err
	}
	var b64 string
	if err := lv.conn.call(ctx, "readFile", map[string]string{"path": abs}, &b64, nil); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("deno: read %s: %w", abs, err)
		}
		return nil, p.lost(ctx, h, fmt.Errorf("deno: read %s: %w", abs, err))
	}
	// The file may have grown since the check: bound the answer too.
	if int64(base64.StdEncoding.DecodedLen(len(b64))) > max+2 {
		return nil, fmt.Errorf("deno: read %s: more than %d bytes: %w", abs, max, sandbox.ErrFileTooLarge)
	}
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("deno: read %s: %w", abs, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("deno: read %s: more than %d bytes: %w", abs, max, sandbox.ErrFileTooLarge)
	}
	return data, nil
}

// ListFiles implements sandbox.Provider.
func (p *Provider) ListFiles(ctx context.Context, h sandbox.Handle, dir string) ([]sandbox.FileInfo, error) {
	lv, st, err := p.liveFor(ctx, h)
	if err != nil {
		return nil, err
	}
	abs, err := resolve(st, dir)
	if err != nil {
		return nil, err
	}
	// Each line is at most a few hundred bytes: this bounds the answer well past MaxListEntries lines.
	out, errOut, code, err := p.runOut(ctx, lv, int64(sandbox.MaxListEntries+1)*600, listScript, abs, top(st, abs))
	if errors.Is(err, sandbox.ErrTooLarge) {
		return nil, fmt.Errorf("deno: list %s: more than %d entries: %w", abs, sandbox.MaxListEntries, sandbox.ErrTooLarge)
	}
	if err := scriptErr("list", abs, out+errOut, code, p.lost(ctx, h, err)); err != nil {
		return nil, err
	}
	var list []sandbox.FileInfo
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 || !strings.HasPrefix(f[3], "./") {
			continue // not a stat line
		}
		raw, err1 := strconv.ParseUint(f[0], 16, 32)
		size, err2 := strconv.ParseInt(f[1], 10, 64)
		mtime, err3 := strconv.ParseInt(f[2], 10, 64)
		if errors.Join(err1, err2, err3) != nil {
			continue
		}
		fi := sandbox.FileInfo{Path: strings.TrimPrefix(f[3], "./"), Mode: unixMode(uint32(raw)), ModTime: time.Unix(mtime, 0).UTC()}
		if fi.Mode.IsRegular() {
			fi.Size = size
		}
		if len(list) == sandbox.MaxListEntries {
			return nil, fmt.Errorf("deno: list %s: more than %d entries: %w", abs, sandbox.MaxListEntries, sandbox.ErrTooLarge)
		}
		list = append(list, fi)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	return list, nil
}

// scriptErr maps a file script's exit code to the sandbox's errors.
func scriptErr(op, abs, out string, code int, err error) error {
	out = strings.TrimSpace(out)
	switch {
	case err != nil:
		return fmt.Errorf("deno: %s %s: %w", op, abs, err)
	case code == 0:
		return nil
	case code == 2:
		return fmt.Errorf("deno: %s %s: %s: %w", op, abs, out, fs.ErrNotExist)
	case code == 3:
		return fmt.Errorf("deno: %s %s: %s: %w", op, abs, out, sandbox.ErrNotRegular)
	case code == 4:
		return fmt.Errorf("deno: %s %s: %s: %w", op, abs, out, sandbox.ErrFileTooLarge)
	}
	return fmt.Errorf("deno: %s %s: exit %d: %s", op, abs, code, out)
}

// resolve makes name absolute (relative names are from the work directory).
func resolve(st handleState, name string) (string, error) {
	abs := name
	if !path.IsAbs(abs) {
		abs = path.Join(st.WorkDir, name)
	}
	abs = path.Clean(abs)
	if abs == "/" {
		return "", fmt.Errorf("path %q: the root directory: %w", name, sandbox.ErrInvalidSpec)
	}
	return abs, nil
}

// top is where the symlink walk starts: the work directory for paths below it, else the root.
func top(st handleState, abs string) string {
	wd := strings.TrimSuffix(st.WorkDir, "/")
	if strings.HasPrefix(abs, wd+"/") {
		return wd
	}
	return ""
}

// unixMode converts st_mode to an fs.FileMode.
func unixMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & 0o170000 {
	case 0o040000:
		mode |= fs.ModeDir
	case 0o120000:
		mode |= fs.ModeSymlink
	case 0o010000:
		mode |= fs.ModeNamedPipe
	case 0o140000:
		mode |= fs.ModeSocket
	case 0o020000:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case 0o060000:
		mode |= fs.ModeDevice
	}
	return mode
}

func randomID() string { return rand.Text()[:16] }
