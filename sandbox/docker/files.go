package docker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/threadbox/threadbox/sandbox"
)

// File operations use the daemon's archive endpoints, so they work on stopped containers, need
// nothing in the image, and run as the daemon (root). Two consequences shape this file:
//
//   - The daemon resolves symlinks in a path itself, with root's rights inside the container. An
//     agent could point output/ at /etc and have a user upload land in /etc. So every path component
//     below the work directory (or below / for paths outside it) is checked not to be a symlink first.
//   - The endpoints see the container's layer and its volumes, not its tmpfs mounts, and refuse to
//     write into a read-only root. With ReadOnlyRoot only the work directory can be written, and
//     /tmp (a tmpfs) is refused with ErrUnsupported rather than silently reading the layer below it.

// WriteFile implements sandbox.Provider. Missing parent directories are created; they and the file
// belong to the sandbox user (the tar headers carry its uid and gid). An existing directory at path
// is not replaced.
func (p *Provider) WriteFile(ctx context.Context, h sandbox.Handle, name string, data []byte, mode fs.FileMode) error {
	st, err := p.meta(ctx, h)
	if err != nil {
		return err
	}
	abs, err := st.resolve(name)
	if err != nil {
		return err
	}
	base, missing, err := p.walkParents(ctx, h.ID, st, path.Dir(abs), true)
	if err != nil {
		return err
	}
	if mode.Perm() == 0 {
		mode = 0o644
	}
	now := time.Now()
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		// Streamed, so a large file is not copied into a second buffer.
		defer close(done)
		tw := tar.NewWriter(pw)
		rel := ""
		for _, dir := range missing {
			rel = path.Join(rel, dir)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755,
				Uid: st.UID, Gid: st.GID, ModTime: now}); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(rel, path.Base(abs)), Mode: int64(mode.Perm()),
			Size: int64(len(data)), Uid: st.UID, Gid: st.GID, ModTime: now}
		err := tw.WriteHeader(hdr)
		if err == nil {
			_, err = tw.Write(data)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err = p.cli.CopyToContainer(ctx, h.ID, base, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errors.New("copy finished")) // unblocks the writer if the daemon stopped reading
	<-done
	if err != nil {
		return p.wrapPathErr(ctx, h.ID, "write", abs, err)
	}
	return nil
}

// ReadFile implements sandbox.Provider.
func (p *Provider) ReadFile(ctx context.Context, h sandbox.Handle, name string, max int64) ([]byte, error) {
	st, err := p.meta(ctx, h)
	if err != nil {
		return nil, err
	}
	abs, err := st.resolve(name)
	if err != nil {
		return nil, err
	}
	if _, _, err := p.walkParents(ctx, h.ID, st, path.Dir(abs), false); err != nil {
		return nil, err
	}
	if max <= 0 {
		max = sandbox.DefaultMaxOutput
	}
	return p.readFile(ctx, h.ID, abs, max)
}

// readFile reads one regular file without the parent checks (also used for /etc/passwd).
func (p *Provider) readFile(ctx context.Context, id, abs string, max int64) ([]byte, error) {
	return retryShort(ctx, func() ([]byte, error) { return p.readFileOnce(ctx, id, abs, max) })
}

func (p *Provider) readFileOnce(ctx context.Context, id, abs string, max int64) ([]byte, error) {
	rc, stat, err := p.cli.CopyFromContainer(ctx, id, abs)
	if err != nil {
		return nil, p.wrapPathErr(ctx, id, "read", abs, err)
	}
	defer rc.Close()
	if err := regular(abs, stat.Mode, stat.LinkTarget); err != nil {
		return nil, err
	}
	if stat.Size > max {
		return nil, fmt.Errorf("read %s: %d bytes, more than %d: %w", abs, stat.Size, max, sandbox.ErrFileTooLarge)
	}
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("read %s: archive: %w", abs, err)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("read %s: changed to a non-regular file: %w", abs, sandbox.ErrNotRegular)
	}
	// The file may have grown since the stat: bound the read itself too.
	data, err := io.ReadAll(io.LimitReader(tr, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", abs, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("read %s: more than %d bytes: %w", abs, max, sandbox.ErrFileTooLarge)
	}
	return data, nil
}

// ListFiles implements sandbox.Provider. The archive endpoint sends file contents along with the
// headers, so listing a large tree costs its size in transfer (over the daemon's socket); ReadTree
// lists and reads in that one pass, and bounds it.
func (p *Provider) ListFiles(ctx context.Context, h sandbox.Handle, dir string) ([]sandbox.FileInfo, error) {
	st, err := p.meta(ctx, h)
	if err != nil {
		return nil, err
	}
	abs, err := st.resolve(dir)
	if err != nil {
		return nil, err
	}
	if _, _, err := p.walkParents(ctx, h.ID, st, path.Dir(abs), false); err != nil {
		return nil, err
	}
	return retryShort(ctx, func() ([]sandbox.FileInfo, error) { return p.listOnce(ctx, h.ID, abs) })
}

func (p *Provider) listOnce(ctx context.Context, id, abs string) ([]sandbox.FileInfo, error) {
	rc, stat, err := p.cli.CopyFromContainer(ctx, id, abs)
	if err != nil {
		return nil, p.wrapPathErr(ctx, id, "list", abs, err)
	}
	defer rc.Close()
	if !stat.Mode.IsDir() {
		return nil, fmt.Errorf("list %s: mode %s, not a directory: %w", abs, stat.Mode, sandbox.ErrNotRegular)
	}
	var out []sandbox.FileInfo
	// A file with several names is sent in full once, then as link entries without a size: they
	// get the size of the entry they link to (always an earlier one in the same archive).
	sizes := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: archive: %w", abs, err)
		}
		// Entries are rebased on the directory's own name: "workspace/", "workspace/a.txt", …
		_, rel, ok := strings.Cut(strings.TrimSuffix(hdr.Name, "/"), "/")
		if !ok || rel == "" {
			continue
		}
		if len(out) == sandbox.MaxListEntries {
			return nil, fmt.Errorf("list %s: more than %d entries: %w", abs, sandbox.MaxListEntries, sandbox.ErrTooLarge)
		}
		fi := sandbox.FileInfo{Path: rel, Mode: hdr.FileInfo().Mode(), ModTime: hdr.ModTime.UTC()}
		switch hdr.Typeflag {
		case tar.TypeReg:
			fi.Size = hdr.Size
			sizes[hdr.Name] = hdr.Size
		case tar.TypeLink:
			fi.Size = sizes[hdr.Linkname]
		}
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// archiveAttempts bounds the reads of an archive that ended short. The daemon writes a file's size
// in the file's header, then copies its bytes; when the sandbox rewrote the file in between
// (truncated it, then wrote it again) there are fewer, and the daemon ends the archive there. That
// is a race with the agent, not a broken sandbox: the read is tried again.
const archiveAttempts = 3

// retryShort runs read until it succeeds, fails otherwise than with an archive that ended short, or
// has run archiveAttempts times. (Request failures are never io.ErrUnexpectedEOF here: wrapErr keeps
// their text only.)
func retryShort[T any](ctx context.Context, read func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range archiveAttempts {
		v, err = read()
		if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) || ctx.Err() != nil {
			break
		}
	}
	return v, err
}

// resolve makes name absolute (relative names are from the work directory) and refuses what the
// archive endpoints cannot see.
func (s handleState) resolve(name string) (string, error) {
	abs := name
	if !path.IsAbs(abs) {
		abs = path.Join(s.WorkDir, name)
	}
	abs = path.Clean(abs)
	if abs == "/" {
		return "", fmt.Errorf("path %q: the root directory: %w", name, sandbox.ErrInvalidSpec)
	}
	if s.ReadOnlyRoot && within(abs, "/tmp") && !within(abs, s.WorkDir) {
		return "", fmt.Errorf("path %s: /tmp is a tmpfs the archive API cannot see; use the work directory %s: %w",
			abs, s.WorkDir, sandbox.ErrUnsupported)
	}
	return abs, nil
}

// walkParents checks the directories from the work directory (or /, for a path outside it) down to
// dir: none may be a symlink or a non-directory. It returns the deepest existing one and, when
// create is set, the names of the missing ones below it; without create a missing one is
// fs.ErrNotExist.
func (p *Provider) walkParents(ctx context.Context, id string, st handleState, dir string, create bool) (base string, missing []string, err error) {
	base = "/"
	if within(dir, st.WorkDir) {
		base = st.WorkDir // the volume's mount point: it cannot be swapped for a symlink
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(dir, base), "/")
	if rest == "" {
		return base, nil, nil
	}
	parts := strings.Split(rest, "/")
	for i, part := range parts {
		next := path.Join(base, part)
		stat, err := p.cli.ContainerStatPath(ctx, id, next)
		if err != nil {
			err = p.wrapPathErr(ctx, id, "stat", next, err)
			if errors.Is(err, fs.ErrNotExist) && create {
				return base, parts[i:], nil
			}
			return "", nil, err
		}
		if !stat.Mode.IsDir() {
			return "", nil, fmt.Errorf("%s: mode %s, not a directory (symlinks are never followed): %w",
				next, stat.Mode, sandbox.ErrNotRegular)
		}
		base = next
	}
	return base, nil, nil
}

func regular(abs string, mode os.FileMode, link string) error {
	switch {
	case mode&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink to %s; symlinks are never followed: %w", abs, link, sandbox.ErrNotRegular)
	case !mode.IsRegular():
		return fmt.Errorf("%s: mode %s: %w", abs, mode, sandbox.ErrNotRegular)
	}
	return nil
}

// wrapPathErr tells a missing path (fs.ErrNotExist) from a missing container (ErrNotFound: recreate)
// and from a write refused by a read-only root.
//
// The archive endpoints answer 404 for both a missing path and a missing container, and the message
// cannot tell them apart: a HEAD stat's answer has none, and the message for a missing path quotes
// the path, which the agent names (a directory called "No such container"). So a 404 is settled by
// asking for the container itself.
func (p *Provider) wrapPathErr(ctx context.Context, id, op, abs string, err error) error {
	if cerrdefs.IsNotFound(err) {
		_, ierr := p.cli.ContainerInspect(ctx, id)
		switch {
		case ierr == nil:
			return fmt.Errorf("%s %s: %w", op, abs, fs.ErrNotExist)
		case cerrdefs.IsNotFound(ierr):
			return wrapErr(op+" "+abs, ierr)
		default:
			return wrapErr(op+" "+abs+": inspect "+id, ierr)
		}
	}
	if strings.Contains(err.Error(), "read-only") {
		return fmt.Errorf("%s %s: only the work directory is writable on a read-only root: %w: %s",
			op, abs, sandbox.ErrUnsupported, err)
	}
	return wrapErr(op+" "+abs, err)
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
