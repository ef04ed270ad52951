// Package shellfs is the file API of providers that have only a shell in the sandbox (Daytona's
// toolbox, Deno's spawn): small POSIX scripts that walk a path without following symlinks, check
// types and sizes, and list a tree, plus the parsing of their answers. One copy, so every such
// provider keeps the same symlink and size rules as Docker's.
package shellfs

import (
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

// walkScript checks each directory from $top down to $d: a symlink is refused (exit 3), a missing
// directory is made when $mk is set, else refused (exit 2).
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

// WriteScript moves an uploaded temporary file ($1) into place ($2) with mode $3, walking from $4;
// before runs first (with $5 and later arguments set as the caller's script names them).
func WriteScript(before string) string {
	return walkScript + `src=$1 dst=$2 mode=$3 top=$4 wd=$5 mk=1 d=${2%/*}
trap 'rm -f "$src"' EXIT
` + before + `walk
if [ -L "$dst" ] || [ -d "$dst" ]; then echo "$dst: not a regular file"; exit 3; fi
mv -f "$src" "$dst" && chmod "$mode" "$dst"`
}

// ReadScript checks that $1 is a regular file of at most $3 bytes, walking from $2.
const ReadScript = walkScript + `f=$1 top=$2 max=$3 mk= d=${1%/*}
walk
if [ -L "$f" ]; then echo "$f is a symlink; symlinks are never followed"; exit 3; fi
[ -e "$f" ] || { echo "$f: no such file"; exit 2; }
[ -f "$f" ] || { echo "$f: not a regular file"; exit 3; }
s=$(stat -c %s "$f") || exit 1
[ "$s" -le "$max" ] || { echo "$s bytes"; exit 4; }`

// ListScript lists the tree below $1 without following symlinks, walking from $2: raw mode (hex),
// size, mtime, path per line. Paths holding a newline are left out: the path ends the line, so
// such a name (a directory "x<newline>81a4 1 1 .") would forge whole entries.
const ListScript = walkScript + `dir=$1 top=$2 mk= d=${1%/*} nl='
'
walk
if [ -L "$dir" ]; then echo "$dir is a symlink; symlinks are never followed"; exit 3; fi
[ -e "$dir" ] || { echo "$dir: no such directory"; exit 2; }
[ -d "$dir" ] || { echo "$dir: not a directory"; exit 3; }
cd "$dir" && find . ! -name . ! -path "*$nl*" -exec stat -c '%f %s %Y %n' {} + 2>/dev/null`

// ListBytes bounds a listing's answer: each line is at most a few hundred bytes, so this is well
// past MaxListEntries lines.
const ListBytes = int64(sandbox.MaxListEntries+1) * 600

// ScriptErr maps a script's exit code to the sandbox's errors; prefix names the provider.
func ScriptErr(prefix, op, abs, out string, code int, err error) error {
	out = strings.TrimSpace(out)
	// The output is the sandbox's and may be a whole listing: quote its start only, since the error
	// reaches logs and threads.
	out = sandbox.ClipText(out, sandbox.MaxErrorText)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %s %s: %w", prefix, op, abs, err)
	case code == 0:
		return nil
	case code == 2:
		return fmt.Errorf("%s: %s %s: %s: %w", prefix, op, abs, out, fs.ErrNotExist)
	case code == 3:
		return fmt.Errorf("%s: %s %s: %s: %w", prefix, op, abs, out, sandbox.ErrNotRegular)
	case code == 4:
		return fmt.Errorf("%s: %s %s: %s: %w", prefix, op, abs, out, sandbox.ErrFileTooLarge)
	}
	return fmt.Errorf("%s: %s %s: exit %d: %s", prefix, op, abs, code, out)
}

// Resolve makes name absolute (relative names are from workDir).
func Resolve(workDir, name string) (string, error) {
	abs := name
	if !path.IsAbs(abs) {
		abs = path.Join(workDir, name)
	}
	abs = path.Clean(abs)
	if abs == "/" {
		return "", fmt.Errorf("path %q: the root directory: %w", name, sandbox.ErrInvalidSpec)
	}
	return abs, nil
}

// Top is where the symlink walk starts: the work directory for paths below it, else the root.
func Top(workDir, abs string) string {
	wd := strings.TrimSuffix(workDir, "/")
	if strings.HasPrefix(abs, wd+"/") {
		return wd
	}
	return ""
}

// ParseList reads ListScript's answer, sorted by path. More than MaxListEntries entries is
// sandbox.ErrTooLarge, as on every provider: past the cap the listing is refused, not returned in part.
func ParseList(prefix, abs, out string) ([]sandbox.FileInfo, error) {
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
		fi := sandbox.FileInfo{Path: strings.TrimPrefix(f[3], "./"), Mode: UnixMode(uint32(raw)), ModTime: time.Unix(mtime, 0).UTC()}
		if fi.Mode.IsRegular() {
			fi.Size = size
		}
		if len(list) == sandbox.MaxListEntries {
			return nil, TooMany(prefix, abs)
		}
		list = append(list, fi)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	return list, nil
}

// TooMany is the error of a listing past MaxListEntries.
func TooMany(prefix, abs string) error {
	return fmt.Errorf("%s: list %s: more than %d entries: %w", prefix, abs, sandbox.MaxListEntries, sandbox.ErrTooLarge)
}

// UnixMode converts st_mode to an fs.FileMode.
func UnixMode(m uint32) fs.FileMode {
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
