package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
)

// open resolves a sandbox path (absolute, or relative to the workdir) to a path inside an os.Root at
// the sandbox's root directory. os.Root refuses to leave the directory, through ".." or symlinks.
func (p *Provider) open(h sandbox.Handle, name string) (*os.Root, string, error) {
	m, err := p.readMeta(h.ID)
	if err != nil {
		return nil, "", err
	}
	if !path.IsAbs(name) {
		name = path.Join(m.WorkDir, name)
	}
	rel := strings.TrimPrefix(path.Clean(name), "/")
	if rel == "" {
		rel = "."
	}
	r, err := os.OpenRoot(p.Root(h))
	if err != nil {
		return nil, "", fmt.Errorf("local sandbox %s: %w", h.ID, err)
	}
	// A symlinked directory on the way is refused outright, as on the container providers: the
	// agent must not be able to redirect a read or an upload through a link.
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		fi, err := r.Lstat(strings.Join(parts[:i], "/"))
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			r.Close()
			return nil, "", fmt.Errorf("local %s: %s is a symlink: %w", name, strings.Join(parts[:i], "/"), sandbox.ErrNotRegular)
		}
	}
	return r, rel, nil
}

// WriteFile implements sandbox.Provider.
func (p *Provider) WriteFile(ctx context.Context, h sandbox.Handle, name string, data []byte, mode fs.FileMode) error {
	r, rel, err := p.open(h, name)
	if err != nil {
		return err
	}
	defer r.Close()
	if dir := path.Dir(rel); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("local write %s: %w", name, err)
		}
	}
	if mode == 0 {
		mode = 0o644
	}
	if err := r.WriteFile(rel, data, mode.Perm()); err != nil {
		return fmt.Errorf("local write %s: %w", name, err)
	}
	return r.Chmod(rel, mode.Perm())
}

// ReadFile implements sandbox.Provider; it refuses symlinks and anything that is not a regular file.
func (p *Provider) ReadFile(ctx context.Context, h sandbox.Handle, name string, max int64) ([]byte, error) {
	r, rel, err := p.open(h, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fi, err := r.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("local read %s: %w", name, fs.ErrNotExist) // the path, not the sandbox
	}
	if err != nil {
		return nil, fmt.Errorf("local read %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("local read %s: %s: %w", name, fi.Mode().Type(), sandbox.ErrNotRegular)
	}
	if max <= 0 {
		max = sandbox.DefaultMaxOutput
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("local read %s (%d bytes > %d): %w", name, fi.Size(), max, sandbox.ErrFileTooLarge)
	}
	f, err := r.Open(rel)
	if err != nil {
		return nil, fmt.Errorf("local read %s: %w", name, err)
	}
	defer f.Close()
	// The file may grow between Lstat and read: bound the read too.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("local read %s: %w", name, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("local read %s: %w", name, sandbox.ErrFileTooLarge)
	}
	return data, nil
}

// ListFiles implements sandbox.Provider; symlinks are listed, never followed.
func (p *Provider) ListFiles(ctx context.Context, h sandbox.Handle, dir string) ([]sandbox.FileInfo, error) {
	r, rel, err := p.open(h, dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	switch fi, err := r.Lstat(rel); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("local list %s: %w", dir, fs.ErrNotExist)
	case err != nil:
		return nil, fmt.Errorf("local list %s: %w", dir, err)
	case !fi.IsDir():
		// A symlink, or a file: walking it would answer an empty listing.
		return nil, fmt.Errorf("local list %s: %s, not a directory: %w", dir, fi.Mode().Type(), sandbox.ErrNotRegular)
	}
	var out []sandbox.FileInfo
	err = fs.WalkDir(r.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == rel {
			return nil
		}
		if len(out) == sandbox.MaxListEntries {
			return fmt.Errorf("more than %d entries: %w", sandbox.MaxListEntries, sandbox.ErrTooLarge)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		name := p
		if rel != "." {
			name = strings.TrimPrefix(p, rel+"/")
		}
		out = append(out, sandbox.FileInfo{Path: name, Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("local list %s: %w", dir, err)
	}
	return out, nil
}
