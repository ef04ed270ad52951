package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/repo"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// newWorkspace wires repos.* and git.* into the pool: nil when no thread can get a repository (no
// default, no channel default, and nothing on the allowlist for the repo command).
func newWorkspace(cfg config.Config, store db.ThreadRepoStore, log *zap.Logger) (agentpool.Workspace, error) {
	if cfg.Repos.Default == "" && len(cfg.Repos.Channels) == 0 && len(cfg.Repos.Allow) == 0 {
		return nil, nil
	}
	hosts := map[string]string{}
	if cfg.Git.URL != "" {
		hosts[cfg.Git.Host] = cfg.Git.URL
	}
	r, err := repo.New(repo.Config{CacheDir: cfg.Repos.CacheDir, Token: cfg.Git.Token, TokenHost: cfg.Git.Host, Hosts: hosts, Allow: repo.Allowlist(cfg.Repos.Allow)})
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	host := cfg.Git.Host
	if host == "" {
		host = "github.com"
	}
	return &repoWorkspace{
		repos: r, forge: &repo.GitHub{APIURL: cfg.Git.GitHubAPIURL, Token: cfg.Git.Token}, store: store,
		sel: repo.Selection{Default: cfg.Repos.Default, Channels: cfg.Repos.Channels, DefaultHost: host},
		who: repo.Identity{Name: cfg.Git.CommitName, Email: cfg.Git.CommitEmail}, log: log.Named("repos"),
	}, nil
}

// repoWorkspace adapts agentpool/repo to the pool's Workspace: the thread's own choice (the repo
// command, recorded in thread_repos) or else its channel's default picks the repository, and
// repository failures carry their words for the user.
type repoWorkspace struct {
	repos *repo.Repos
	forge repo.Forge
	store db.ThreadRepoStore
	sel   repo.Selection
	who   repo.Identity
	log   *zap.Logger
}

var (
	_ agentpool.WorkspacePusher    = (*repoWorkspace)(nil)
	_ agentpool.WorkspaceDescriber = (*repoWorkspace)(nil)
	_ agentpool.WorkspaceChooser   = (*repoWorkspace)(nil)
)

// spec is the thread's repository: its recorded one (pinned=true), else its channel's default; ok
// is false when it has none.
func (w *repoWorkspace) spec(ctx context.Context, t agentpool.WorkspaceThread) (spec repo.Spec, pinned, ok bool, err error) {
	if w.store != nil {
		row, err := w.store.ThreadRepoGet(ctx, t.ThreadKey)
		switch {
		case err == nil:
			spec, err := repo.Parse(specText(row.Repo, row.BaseBranch), w.sel.DefaultHost)
			return spec, true, err == nil, err
		case !errors.Is(err, db.ErrNotFound):
			return repo.Spec{}, false, false, fmt.Errorf("the thread's repository: %w", err)
		}
	}
	spec, ok, err = w.sel.For(t.ChannelID)
	return spec, false, ok, err
}

func specText(name, branch string) string {
	if branch == "" {
		return name
	}
	return name + "@" + branch
}

// repoName is host/owner/name, the form thread_repos keeps.
func repoName(s repo.Spec) string { return s.Host + "/" + s.FullName() }

func (w *repoWorkspace) Prepare(ctx context.Context, sb sandbox.Sandbox, t agentpool.WorkspaceThread) (string, error) {
	spec, pinned, ok, err := w.spec(ctx, t)
	if err == nil && !ok {
		return "", nil
	}
	if err == nil {
		var note string
		// Commits carry the requesting user's name when the chat platform gave it, with the
		// configured address (forges attribute commits by address), else the bot identity.
		who := w.who
		if t.UserName != "" {
			who.Name = t.UserName
		}
		if note, err = w.repos.Ensure(ctx, sb, spec, t.ThreadKey, who); err == nil {
			if note != "" && !pinned && w.store != nil {
				// The thread keeps the default it started on, even if repos.default changes later.
				if _, perr := w.store.ThreadRepoPin(ctx, w.row(t.ThreadKey, spec)); perr != nil {
					w.log.Warn("recording the thread's repository", zap.String("thread", t.ThreadKey), zap.Error(perr))
				}
			}
			return note, nil
		}
	}
	return "", w.userErr(err, spec)
}

func (w *repoWorkspace) row(threadKey string, spec repo.Spec) db.ThreadRepo {
	return db.ThreadRepo{ThreadKey: threadKey, Repo: repoName(spec), BaseBranch: spec.Branch, WorkBranch: repo.ThreadBranch(threadKey)}
}

// userErr gives a repository failure its words for the user; others the bot explains by code.
func (w *repoWorkspace) userErr(err error, spec repo.Spec) error {
	if text := repo.UserText(err, spec); text != "" {
		return &agentpool.WorkspaceError{Text: text, Err: err}
	}
	return err
}

// Push implements agentpool.WorkspacePusher: the thread's branch goes to the forge and its pull
// request is opened or updated; the pushed commit is recorded for status and the ops view.
func (w *repoWorkspace) Push(ctx context.Context, sb sandbox.Sandbox, t agentpool.WorkspaceThread) (string, error) {
	spec, _, ok, err := w.spec(ctx, t)
	if err == nil && !ok {
		return "", agentpool.ErrNoWorkspace
	}
	if err == nil {
		var note string
		note, err = w.repos.Deliver(ctx, sb, spec, t.ThreadKey, w.forge)
		// Recorded even when the pull request then failed: the branch is on the forge.
		w.recordPush(ctx, t.ThreadKey, spec)
		if err == nil {
			return note, nil
		}
	}
	return "", w.userErr(err, spec)
}

// recordPush stores where the thread's branch now is on the forge (the cache follows each push).
func (w *repoWorkspace) recordPush(ctx context.Context, threadKey string, spec repo.Spec) {
	last := w.repos.LastPushed(ctx, spec, threadKey)
	if last == "" || w.store == nil {
		return
	}
	_, err := w.store.ThreadRepoPushed(ctx, threadKey, repoName(spec), last)
	if errors.Is(err, db.ErrNotFound) {
		// A thread that never had its default recorded (checked out before thread_repos existed).
		if _, err = w.store.ThreadRepoPin(ctx, w.row(threadKey, spec)); err == nil {
			_, err = w.store.ThreadRepoPushed(ctx, threadKey, repoName(spec), last)
		}
	}
	if err != nil {
		w.log.Warn("recording the thread's push", zap.String("thread", threadKey), zap.Error(err))
	}
}

// Describe implements agentpool.WorkspaceDescriber for status.
func (w *repoWorkspace) Describe(ctx context.Context, t agentpool.WorkspaceThread) string {
	spec, _, ok, err := w.spec(ctx, t)
	if err != nil || !ok {
		return ""
	}
	line := fmt.Sprintf("Repository: %s, branch %s", repoName(spec), repo.ThreadBranch(t.ThreadKey))
	if spec.Branch != "" {
		line = fmt.Sprintf("Repository: %s (from %s), branch %s", repoName(spec), spec.Branch, repo.ThreadBranch(t.ThreadKey))
	}
	// git updates refs atomically, so reading one while a fetch or push runs is safe. The cache is
	// this process's; the record, which another replica may have written, fills in for it.
	last := w.repos.LastPushed(ctx, spec, t.ThreadKey)
	if last == "" && w.store != nil {
		if row, err := w.store.ThreadRepoGet(ctx, t.ThreadKey); err == nil && strings.EqualFold(row.Repo, repoName(spec)) {
			last = row.PushedCommit
		}
	}
	if len(last) >= 12 {
		return line + ", last pushed " + last[:12]
	}
	return line + ", not pushed yet"
}

// Choose implements agentpool.WorkspaceChooser for the repo command: the repository must parse, be
// on the allowlist and exist on the forge (with its branch) before the thread records it.
func (w *repoWorkspace) Choose(ctx context.Context, t agentpool.WorkspaceThread, choice string) (agentpool.Choice, error) {
	spec, err := repo.Parse(choice, w.sel.DefaultHost)
	if err == nil {
		err = w.repos.Check(spec)
	}
	if err == nil {
		err = w.repos.Fetch(ctx, spec)
	}
	if err != nil {
		return agentpool.Choice{}, w.userErr(err, spec)
	}
	if w.store == nil {
		return agentpool.Choice{}, errors.New("repo: no store to record the thread's repository in")
	}
	ch := agentpool.Choice{Name: specText(repoName(spec), spec.Branch)}
	cur, _, ok, err := w.spec(ctx, t)
	if err == nil && ok {
		ch.Previous = specText(repoName(cur), cur.Branch)
		ch.Same = strings.EqualFold(repoName(cur), repoName(spec)) && cur.Branch == spec.Branch
	}
	ch.Record = func(ctx context.Context) error {
		_, err := w.store.ThreadRepoSet(ctx, w.row(t.ThreadKey, spec))
		return err
	}
	return ch, nil
}

// Unsaved implements agentpool.WorkspaceChooser: commits not pushed and uncommitted changes.
func (w *repoWorkspace) Unsaved(ctx context.Context, sb sandbox.Sandbox, t agentpool.WorkspaceThread) (string, error) {
	return w.repos.Unsaved(ctx, sb, t.ThreadKey)
}
