package repo

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
)

// Identity is who commits in the sandbox: the chat user, or the configured bot identity.
type Identity struct {
	Name, Email string
}

// Checkout is what Prepare put into a sandbox.
type Checkout struct {
	Spec Spec
	// Branch is the thread's branch (threadbox/…); BaseBranch the branch it started from; Base the
	// commit it started at.
	Branch, BaseBranch, Base string
	// Cold is true when the repository had to be cloned (no cache yet).
	Cold bool
	// Restored is true when the thread's branch already existed on the forge (pushed before this
	// sandbox was made), so the checkout starts from it, at Base.
	Restored bool
}

// baseRef marks, inside the sandbox's repository, the commit the thread started from: bundles are
// cut from there, so a push carries only the thread's own commits.
const baseRef = "refs/threadbox/base"

// pushedRef marks, inside the sandbox's repository, the commit last pushed from it (or restored
// from the forge): the next push's lease expects the forge's branch there.
const pushedRef = "refs/threadbox/pushed"

// excluded are the workdir's own directories, kept out of the agent's git status.
var excluded = []string{"/input/", "/output/", "/.threadbox/"}

// Prepare fetches the repository on the bot's side and copies its working tree, .git included, into
// the sandbox's working directory, on branch (threadbox/…) from s.Branch (or the default branch),
// with who as the commit identity. The sandbox's origin is the URL without credentials.
func (r *Repos) Prepare(ctx context.Context, sb sandbox.Sandbox, s Spec, branch string, who Identity) (Checkout, error) {
	if !strings.HasPrefix(branch, BranchPrefix) || !ValidBranch(branch) {
		return Checkout{}, fmt.Errorf("%s: %w", branch, ErrBranchRefused)
	}
	unlock, err := r.lock(ctx, s)
	if err != nil {
		return Checkout{}, err
	}
	cache, cold, err := r.sync(ctx, s)
	if err != nil {
		unlock()
		return Checkout{}, err
	}
	work, err := os.MkdirTemp(r.cfg.CacheDir, ".work-*")
	if err != nil {
		unlock()
		return Checkout{}, fmt.Errorf("repo: work copy: %w", err)
	}
	defer os.RemoveAll(work)
	// A local clone hardlinks the cache's objects: cheap, and self-contained (no alternates), so
	// the copy in the sandbox needs nothing of the bot's disk.
	args := []string{"clone", "--quiet", "--local"}
	// A thread whose branch was pushed starts again from there (its sandbox was lost or recreated):
	// what was pushed is back.
	_, err = r.git.run(ctx, cache, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}")
	restored := err == nil
	switch {
	case restored:
		args = append(args, "--branch", branch)
	case s.Branch != "":
		args = append(args, "--branch", s.Branch)
	}
	_, err = r.git.run(ctx, "", append(args, cache, work)...)
	unlock()
	if err != nil {
		return Checkout{}, fmt.Errorf("repo: work copy of %s: %w", s, err)
	}
	co := Checkout{Spec: s, Branch: branch, Cold: cold, Restored: restored}
	steps := [][]string{
		{"remote", "set-url", "origin", r.URL(s)},
		{"checkout", "--quiet", "-B", branch},
		{"update-ref", baseRef, "HEAD"},
		{"config", "user.name", who.Name},
		{"config", "user.email", who.Email},
	}
	if restored {
		steps = append(steps, []string{"update-ref", pushedRef, "HEAD"})
	}
	for _, st := range steps {
		if _, err := r.git.run(ctx, work, st...); err != nil {
			return Checkout{}, fmt.Errorf("repo: preparing %s: %w", s, err)
		}
	}
	out, err := r.git.run(ctx, work, "rev-parse", "HEAD")
	if err != nil {
		return Checkout{}, fmt.Errorf("repo: preparing %s: %w", s, err)
	}
	co.Base = strings.TrimSpace(string(out))
	co.BaseBranch = s.Branch
	if co.BaseBranch == "" {
		if co.BaseBranch, err = r.defaultBranch(ctx, cache); err != nil {
			return Checkout{}, fmt.Errorf("repo: %s: %w", s, err)
		}
	}
	exclude := filepath.Join(work, ".git", "info", "exclude")
	if err := os.MkdirAll(filepath.Dir(exclude), 0o755); err != nil {
		return Checkout{}, fmt.Errorf("repo: %w", err)
	}
	if err := appendFile(exclude, "\n"+strings.Join(excluded, "\n")+"\n"); err != nil {
		return Checkout{}, fmt.Errorf("repo: %w", err)
	}
	if err := copyIn(ctx, sb, work); err != nil {
		return Checkout{}, fmt.Errorf("repo: copying %s into the sandbox: %w", s, err)
	}
	return co, nil
}

// defaultBranch is the forge's default branch as the cache recorded it when it cloned.
func (r *Repos) defaultBranch(ctx context.Context, cache string) (string, error) {
	out, err := r.git.run(ctx, cache, "symbolic-ref", "--short", "HEAD")
	if err != nil {
		return "", fmt.Errorf("default branch: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// copyIn streams dir as a tar archive into `tar -x` in the sandbox's working directory: one Exec,
// no temporary archive on either side.
func copyIn(ctx context.Context, sb sandbox.Sandbox, dir string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, dir)) }()
	var stderr bytes.Buffer
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"tar", "-x", "-f", "-"}, Stdin: pr, Stderr: &stderr, MaxOutput: 64 << 10})
	_ = pr.CloseWithError(io.ErrClosedPipe) // stops the writer if tar ended early
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("tar exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// lastEntry is written after everything else: Ensure takes a sandbox with .git/HEAD for a finished
// checkout, so a copy cut short (a full disk, a cancelled context) leaves none and the next Ensure
// copies again, over what the cut one left.
const lastEntry = ".git/HEAD"

// writeTar writes dir's tree (regular files, directories, symlinks) as a tar stream, lastEntry last.
func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	add := func(path, rel string, info fs.FileInfo) error {
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			var err error
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // sockets, devices: nothing a repository holds
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		_ = f.Close()
		return err
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." || filepath.ToSlash(rel) == lastEntry {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return add(path, rel, info)
	})
	if err != nil {
		return err
	}
	last := filepath.Join(dir, filepath.FromSlash(lastEntry))
	info, err := os.Lstat(last)
	if err != nil {
		return err
	}
	if err := add(last, lastEntry, info); err != nil {
		return err
	}
	return tw.Close()
}
