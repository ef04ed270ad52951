package repo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config is the bot side of repositories.
type Config struct {
	// CacheDir holds one bare mirror per repository, fetched again before each use.
	CacheDir string
	// Token authenticates clones, fetches and pushes (git.token); it never enters a sandbox.
	Token string
	// TokenHost is the forge host Token belongs to (git.host; default github.com): git sends the
	// token to that host's base URL only, never to another host on the allowlist.
	TokenHost string
	// Hosts maps a forge host to its base URL (default https://<host>): GitHub Enterprise, tests.
	Hosts map[string]string
	// Allow is repos.allow.
	Allow Allowlist
	// MaxBundle caps a bundle taken out of a sandbox (default 512 MiB).
	MaxBundle int64
}

// DefaultMaxBundle caps a pushed bundle.
const DefaultMaxBundle = 512 << 20

// Repos clones, copies into sandboxes and pushes. Safe for concurrent use: each repository's cache
// is used by one operation at a time in this process.
type Repos struct {
	cfg Config
	git git

	mu    sync.Mutex               // protects locks
	locks map[string]chan struct{} // one slot per repository

	// onWait, for tests, runs when lock finds another process holding a repository's cache.
	onWait func()
}

// New builds Repos; the cache directory is created on first use. It removes what a process killed
// mid-operation left in it (sweep).
func New(cfg Config) (*Repos, error) {
	if cfg.CacheDir == "" {
		return nil, errors.New("repo: CacheDir is required")
	}
	cfg.MaxBundle = cmp.Or(cfg.MaxBundle, DefaultMaxBundle)
	// Host names are compared in lower case, as Parse writes them: git.host as the operator
	// spelled it names the same forge.
	cfg.TokenHost = strings.ToLower(cmp.Or(cfg.TokenHost, "github.com"))
	hosts := make(map[string]string, len(cfg.Hosts))
	for h, u := range cfg.Hosts {
		hosts[strings.ToLower(h)] = u
	}
	cfg.Hosts = hosts
	sweep(cfg.CacheDir, time.Now())
	r := &Repos{cfg: cfg, locks: map[string]chan struct{}{}}
	r.git = git{token: cfg.Token, tokenURL: r.baseURL(cfg.TokenHost)}
	return r, nil
}

// Check parses nothing: it applies the allowlist (callers parse with Parse).
func (r *Repos) Check(s Spec) error { return r.cfg.Allow.Check(s) }

// URL is the repository's clone URL, without credentials: what the sandbox's origin says.
func (r *Repos) URL(s Spec) string {
	return r.baseURL(s.Host) + "/" + url.PathEscape(s.Owner) + "/" + url.PathEscape(s.Name) + ".git"
}

// baseURL is a host's base URL, without a trailing slash.
func (r *Repos) baseURL(host string) string {
	base := r.cfg.Hosts[host]
	if base == "" {
		base = "https://" + host
	}
	return strings.TrimRight(base, "/")
}

// lock serializes the operations on one repository's cache: in this process, and with other
// processes sharing the cache directory, another replica (an flock on a file beside the
// repository). git's own ref locks do not wait: a fetch that meets another's fails. The wait ends
// with ctx: a replica that hangs while it holds the lock must not hang this one's turns for good.
func (r *Repos) lock(ctx context.Context, s Spec) (func(), error) {
	key := strings.ToLower(s.Host + "/" + s.FullName())
	r.mu.Lock()
	l, ok := r.locks[key]
	if !ok {
		l = make(chan struct{}, 1)
		r.locks[key] = l
	}
	r.mu.Unlock()
	select {
	case l <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("repo: waiting for the cache of %s: %w", s.FullName(), ctx.Err())
	}
	f, err := r.lockFile(ctx, s)
	if err != nil {
		<-l
		return nil, err
	}
	return func() { _ = f.Close(); <-l }, nil // closing the file releases the flock
}

// lockFile opens and flocks the repository's lock file, waiting for another process to release it
// or ctx to end.
func (r *Repos) lockFile(ctx context.Context, s Spec) (*os.File, error) {
	name := strings.TrimSuffix(r.cachePath(s), ".git") + ".lock"
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return nil, fmt.Errorf("repo: cache: %w", err)
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("repo: cache lock: %w", err)
	}
	fd := int(f.Fd())
	err = tryFlock(fd)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		if r.onWait != nil {
			r.onWait()
		}
		err = flockWait(ctx, fd)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("repo: cache lock: %w", err)
	}
	return f, nil
}

// tryFlock takes the lock if it is free; EWOULDBLOCK if another holds it. A signal interrupting the
// call is not a failure.
func tryFlock(fd int) error {
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// flockPoll is how often a wait for another process's lock looks again: flock cannot wait on a
// context, and a blocking flock would outlive it.
const flockPoll = 50 * time.Millisecond

// flockWait takes the lock, looking every flockPoll until it is free or ctx ends.
func flockWait(ctx context.Context, fd int) error {
	tick := time.NewTicker(flockPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for another process: %w", ctx.Err())
		case <-tick.C:
		}
		if err := tryFlock(fd); !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
	}
}

func (r *Repos) cachePath(s Spec) string {
	return filepath.Join(r.cfg.CacheDir, strings.ToLower(s.Host), strings.ToLower(s.Owner), strings.ToLower(s.Name)+".git")
}

// sync brings the repository's mirror up to date (a clone the first time), with the caller holding
// its lock, and returns its path. cold reports whether it had to clone.
func (r *Repos) sync(ctx context.Context, s Spec) (dir string, cold bool, err error) {
	if err := r.Check(s); err != nil {
		return "", false, err
	}
	dir = r.cachePath(s)
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
		if _, err := r.git.run(ctx, dir, "fetch", "--prune", "--quiet", r.URL(s), "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"); err != nil {
			return "", false, fetchErr(s, err)
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return "", false, fmt.Errorf("repo: cache: %w", err)
		}
		tmp, err := os.MkdirTemp(filepath.Dir(dir), ".clone-*")
		if err != nil {
			return "", false, fmt.Errorf("repo: cache: %w", err)
		}
		defer os.RemoveAll(tmp)
		if _, err := r.git.run(ctx, "", "clone", "--bare", "--quiet", r.URL(s), tmp); err != nil {
			return "", false, fetchErr(s, err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			// Another process sharing the cache (a second replica) cloned it meanwhile: its clone
			// is as fresh as ours, and ours goes with tmp.
			if _, serr := os.Stat(filepath.Join(dir, "HEAD")); serr != nil {
				return "", false, fmt.Errorf("repo: cache: %w", err)
			}
		}
		cold = true
	}
	if s.Branch != "" {
		if _, err := r.git.run(ctx, dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+s.Branch+"^{commit}"); err != nil {
			return "", cold, fmt.Errorf("%s: branch %s: %w", s, s.Branch, ErrNotFound)
		}
	}
	return dir, cold, nil
}

func fetchErr(s Spec, err error) error {
	if notFound(err) {
		return fmt.Errorf("%s: %w: %w", s, ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w: %w", s, ErrFetch, err)
}

// Fetch brings the repository into the bot's cache (checking the allowlist, that the forge has it,
// and its branch when s names one), so a thread's choice is checked before anything is recorded.
func (r *Repos) Fetch(ctx context.Context, s Spec) error {
	unlock, err := r.lock(ctx, s)
	if err != nil {
		return err
	}
	defer unlock()
	_, _, err = r.sync(ctx, s)
	return err
}
