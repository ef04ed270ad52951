package daytona

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/toolbox"
)

// File operations keep the Docker provider's rules: no path component below the work directory (or
// below /, outside it) may be a symlink, a read never follows one, and reads are bounded. The
// toolbox's own file calls resolve symlinks, so every operation first checks the path with a short
// script (walkScript) run by process/execute, as the sandbox's user; the bytes then travel through
// the toolbox's upload and download.

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

// writeScript moves an uploaded temporary file ($1) into place ($2) with mode $3, making the work
// directory ($5) first.
const writeScript = walkScript + `src=$1 dst=$2 mode=$3 top=$4 wd=$5 mk=1 d=${2%/*}
trap 'rm -f "$src"' EXIT
` + ensureWorkDir + `walk
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

// WriteFile implements sandbox.Provider: upload to a temporary file, then move it into place after
// the parent checks (missing parents are created).
func (p *Provider) WriteFile(ctx context.Context, h sandbox.Handle, name string, data []byte, mode fs.FileMode) error {
	st, err := decodeHandle(h)
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
	tb, err := p.toolbox(ctx, h, st)
	if err != nil {
		return err
	}
	tmp := "/tmp/.threadbox-upload-" + randomID()
	if err := p.upload(ctx, h, tb, tmp, strings.NewReader(string(data))); err != nil {
		return fmt.Errorf("write %s: %w", abs, err)
	}
	out, code, err := p.run(ctx, h, writeScript, tmp, abs, strconv.FormatUint(uint64(mode.Perm()), 8), top(st, abs), st.WorkDir)
	return scriptErr("write", abs, out, code, err)
}

// ReadFile implements sandbox.Provider.
func (p *Provider) ReadFile(ctx context.Context, h sandbox.Handle, name string, max int64) ([]byte, error) {
	st, err := decodeHandle(h)
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
	out, code, err := p.run(ctx, h, readScript, abs, top(st, abs), strconv.FormatInt(max, 10))
	if err := scriptErr("read", abs, out, code, err); err != nil {
		return nil, err
	}
	tb, err := p.toolbox(ctx, h, st)
	if err != nil {
		return nil, err
	}
	resp, err := tb.c.DownloadFile(ctx, &toolbox.DownloadFileParams{Path: abs})
	if err != nil {
		return nil, p.classify(ctx, h, fmt.Errorf("read %s: %w", abs, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := decode("download", resp, nil)
		if statusOf(err) == http.StatusNotFound {
			return nil, fmt.Errorf("read %s: %w: %w", abs, fs.ErrNotExist, stripNotFound(err))
		}
		return nil, p.classify(ctx, h, err)
	}
	// The file may have grown since the check: bound the read itself too.
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", abs, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("read %s: more than %d bytes: %w", abs, max, sandbox.ErrFileTooLarge)
	}
	return data, nil
}

// ListFiles implements sandbox.Provider.
func (p *Provider) ListFiles(ctx context.Context, h sandbox.Handle, dir string) ([]sandbox.FileInfo, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return nil, err
	}
	abs, err := resolve(st, dir)
	if err != nil {
		return nil, err
	}
	out, code, err := p.run(ctx, h, listScript, abs, top(st, abs))
	if err := scriptErr("list", abs, out, code, err); err != nil {
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
		if err := errors.Join(err1, err2, err3); err != nil {
			continue
		}
		fi := sandbox.FileInfo{Path: strings.TrimPrefix(f[3], "./"), Mode: unixMode(uint32(raw)), ModTime: time.Unix(mtime, 0).UTC()}
		if fi.Mode.IsRegular() {
			fi.Size = size
		}
		if len(list) == sandbox.MaxListEntries {
			// As on every provider: past the cap the listing is refused, not returned in part.
			return nil, fmt.Errorf("daytona: list %s: more than %d entries: %w", abs, sandbox.MaxListEntries, sandbox.ErrTooLarge)
		}
		list = append(list, fi)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	return list, nil
}

// upload streams r to dst with the toolbox's multipart upload.
func (p *Provider) upload(ctx context.Context, h sandbox.Handle, tb toolboxClient, dst string, r io.Reader) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		part, err := mw.CreateFormFile("file", path.Base(dst))
		if err == nil {
			_, err = io.Copy(part, r)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	err := p.tbCall(ctx, h, "upload", func(ctx context.Context) (*http.Response, error) {
		return tb.c.UploadFileWithBody(ctx, &toolbox.UploadFileParams{Path: dst}, mw.FormDataContentType(), pr)
	}, nil)
	pr.CloseWithError(errors.New("upload finished")) // unblocks the writer if the server stopped reading
	return err
}

// scriptErr maps a file script's exit code to the sandbox's errors.
func scriptErr(op, abs, out string, code int, err error) error {
	out = strings.TrimSpace(out)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %w", op, abs, err)
	case code == 0:
		return nil
	case code == 2:
		return fmt.Errorf("%s %s: %s: %w", op, abs, out, fs.ErrNotExist)
	case code == 3:
		return fmt.Errorf("%s %s: %s: %w", op, abs, out, sandbox.ErrNotRegular)
	case code == 4:
		return fmt.Errorf("%s %s: %s: %w", op, abs, out, sandbox.ErrFileTooLarge)
	}
	return fmt.Errorf("%s %s: exit %d: %s", op, abs, code, out)
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
