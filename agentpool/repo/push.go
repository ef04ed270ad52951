package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
)

// Pushed is what a push delivered.
type Pushed struct {
	Branch string
	// Commit is the branch's commit now on the forge.
	Commit string
}

// Push takes the thread's branch out of the sandbox as a git bundle, verifies it on the bot's side
// (it must hold exactly that branch, at the commit the sandbox reports, on top of what the bot
// already has), and pushes it with the token. Only threadbox/* branches are pushed, and only with
// a lease: the forge's branch must still be where this thread last left it (pushedRef in the
// sandbox; absent before the first push), so nothing anyone else pushed is ever overwritten.
func (r *Repos) Push(ctx context.Context, sb sandbox.Sandbox, s Spec, branch string) (Pushed, error) {
	if !strings.HasPrefix(branch, BranchPrefix) || !ValidBranch(branch) {
		return Pushed{}, fmt.Errorf("%s: %w", branch, ErrBranchRefused)
	}
	ref := "refs/heads/" + branch
	head, err := sandboxGit(ctx, sb, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		return Pushed{}, fmt.Errorf("%s has no branch %s: %w", s, branch, ErrNothingToPush)
	}
	head = strings.TrimSpace(head)
	base, _ := sandboxGit(ctx, sb, "rev-parse", "--verify", "--quiet", baseRef)
	base = strings.TrimSpace(base)
	lastPushed, _ := sandboxGit(ctx, sb, "rev-parse", "--verify", "--quiet", pushedRef)
	lastPushed = strings.TrimSpace(lastPushed)
	if head == lastPushed || head == base {
		return Pushed{}, fmt.Errorf("%s at %s: %w", branch, short(head), ErrNothingToPush)
	}
	unlock, err := r.lock(ctx, s)
	if err != nil {
		return Pushed{}, err
	}
	defer unlock()
	cache, _, err := r.sync(ctx, s)
	if err != nil {
		return Pushed{}, err
	}
	bundle, err := r.takeBundle(ctx, sb, ref, base, lastPushed)
	if err != nil {
		return Pushed{}, err
	}
	defer os.Remove(bundle)
	// The bundle goes into a quarantine repository that borrows the cache's objects, never into the
	// cache itself: every checkout copies all of the cache's objects into its sandbox, so a push the
	// forge refuses would otherwise hand this sandbox's commits to every other thread's.
	q, err := r.quarantine(ctx, cache)
	if err != nil {
		return Pushed{}, err
	}
	defer os.RemoveAll(q)
	if _, err := r.git.run(ctx, q, "bundle", "verify", "--quiet", bundle); err != nil {
		return Pushed{}, fmt.Errorf("%w: verify: %w", ErrBadBundle, err)
	}
	heads, err := r.git.run(ctx, q, "bundle", "list-heads", bundle)
	if err != nil {
		return Pushed{}, fmt.Errorf("%w: %w", ErrBadBundle, err)
	}
	if got := strings.TrimSpace(string(heads)); got != head+" "+ref {
		return Pushed{}, fmt.Errorf("%w: it holds %.200q, want %s at %s", ErrBadBundle, got, ref, short(head))
	}
	if _, err := r.git.run(ctx, q, "fetch", "--quiet", "--no-write-fetch-head", bundle, "+"+ref+":"+ref); err != nil {
		return Pushed{}, fmt.Errorf("%w: %w", ErrBadBundle, err)
	}
	lease := "--force-with-lease=" + ref + ":" + lastPushed
	if _, err := r.git.run(ctx, q, "push", "--quiet", "--no-verify", lease, r.URL(s), ref+":"+ref); err != nil {
		return Pushed{}, fmt.Errorf("%s %s: %w: %w", s, branch, ErrPushRejected, err)
	}
	// The sandbox's record first: the next push's lease expects the forge's branch there.
	if _, err := sandboxGit(ctx, sb, "update-ref", pushedRef, head); err != nil {
		// Pushed all the same; the next push's lease is then stale and refused, which is safe.
		return Pushed{Branch: branch, Commit: head}, fmt.Errorf("repo: recording the push in the sandbox: %w", err)
	}
	// The forge has it now, so the cache may too: it mirrors the forge, with the branch where the
	// push left it (status reads it). Only a convenience, so a failure (another replica sharing
	// the cache holds the ref's lock) does not fail the push: the next fetch brings the branch.
	_, _ = r.git.run(ctx, cache, "fetch", "--quiet", "--no-write-fetch-head", q, "+"+ref+":"+ref)
	return Pushed{Branch: branch, Commit: head}, nil
}

// takeBundle has the sandbox write a bundle of ref (less what the bot already has: the base and
// the last push) to its standard output, into a file on the bot's side, within MaxBundle.
func (r *Repos) takeBundle(ctx context.Context, sb sandbox.Sandbox, ref, base, lastPushed string) (string, error) {
	f, err := os.CreateTemp(r.cfg.CacheDir, ".bundle-*")
	if err != nil {
		return "", fmt.Errorf("repo: %w", err)
	}
	name := f.Name()
	args := []string{"git", "bundle", "create", "-", ref}
	for _, not := range []string{base, lastPushed} {
		if not != "" {
			args = append(args, "^"+not)
		}
	}
	// The sandbox's words, for the error: the provider bounds each stream only at MaxBundle.
	stderr := &tailWriter{max: maxStderr}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: args, Stdout: f, Stderr: stderr, MaxOutput: r.cfg.MaxBundle})
	cerr := f.Close()
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %w", ErrBadBundle, err)
	case res.Truncated:
		err = fmt.Errorf("%w: the bundle is over %d bytes", ErrBadBundle, r.cfg.MaxBundle)
	case res.ExitCode != 0:
		err = fmt.Errorf("%w: git bundle exited %d: %s", ErrBadBundle, res.ExitCode, strings.ToValidUTF8(strings.TrimSpace(stderr.String()), "\uFFFD"))
	case cerr != nil:
		err = fmt.Errorf("repo: %w", cerr)
	}
	if err != nil {
		_ = os.Remove(name)
		return "", err
	}
	abs, _ := filepath.Abs(name)
	return abs, nil
}

// sandboxGit runs git in the sandbox's working directory and returns its output.
func sandboxGit(ctx context.Context, sb sandbox.Sandbox, args ...string) (string, error) {
	var out bytes.Buffer
	stderr := &tailWriter{max: maxStderr}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: append([]string{"git"}, args...), Stdout: &out, Stderr: stderr, MaxOutput: 1 << 20})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return out.String(), errors.New(strings.TrimSpace("git " + strings.Join(args, " ") + ": " + stderr.String()))
	}
	return out.String(), nil
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// Unsaved describes what the sandbox's checkout holds that was never pushed, for a user about to
// move the thread elsewhere: commits on the thread's branch past the last push (or past where the
// thread started), and uncommitted changes. "" when there is none, or no checkout at all.
func (r *Repos) Unsaved(ctx context.Context, sb sandbox.Sandbox, threadKey string) (string, error) {
	if _, err := sb.ReadFile(ctx, ".git/HEAD", 64<<10); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("repo: reading .git/HEAD: %w", err)
	}
	branch := ThreadBranch(threadKey)
	var parts []string
	// Every local branch counts, not only the thread's: the agent may have committed on another.
	args := []string{"rev-list", "--count", "--branches"}
	for _, not := range []string{pushedRef, baseRef} {
		if out, err := sandboxGit(ctx, sb, "rev-parse", "--verify", "--quiet", not); err == nil {
			args = append(args, "^"+strings.TrimSpace(out))
		}
	}
	// What the forge had at the checkout (origin's branches) is not the thread's work either.
	out, err := sandboxGit(ctx, sb, append(args, "--not", "--remotes")...)
	if err != nil {
		return "", fmt.Errorf("repo: counting commits not pushed: %w", err)
	}
	if n := strings.TrimSpace(out); n != "0" {
		if n == "1" {
			parts = append(parts, "1 commit not pushed")
		} else {
			parts = append(parts, n+" commits not pushed")
		}
	}
	out, err = sandboxGit(ctx, sb, "status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return "", fmt.Errorf("repo: git status: %w", err)
	}
	if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; strings.TrimSpace(out) != "" {
		parts = append(parts, fmt.Sprintf("uncommitted changes in %d file(s)", lines))
	}
	if len(parts) == 0 {
		return "", nil
	}
	return fmt.Sprintf("The sandbox's checkout has %s (branch %s).", strings.Join(parts, " and "), branch), nil
}

// quarantine makes an empty bare repository beside the cache that reads the cache's objects
// (alternates) and keeps what is fetched into it to itself; the caller removes it.
func (r *Repos) quarantine(ctx context.Context, cache string) (string, error) {
	q, err := os.MkdirTemp(r.cfg.CacheDir, ".push-*")
	if err != nil {
		return "", fmt.Errorf("repo: %w", err)
	}
	objects, err := filepath.Abs(filepath.Join(cache, "objects"))
	if err == nil {
		_, err = r.git.run(ctx, "", "init", "--quiet", "--bare", q)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(q, "objects", "info", "alternates"), []byte(objects+"\n"), 0o600)
	}
	if err != nil {
		_ = os.RemoveAll(q)
		return "", fmt.Errorf("repo: quarantine: %w", err)
	}
	return q, nil
}
