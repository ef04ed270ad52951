package main

import (
	"context"
	"fmt"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/repo"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/sandbox"
)

// newWorkspace wires repos.* and git.* into the pool: nil when no thread gets a repository.
func newWorkspace(cfg config.Config) (agentpool.Workspace, error) {
	if cfg.Repos.Default == "" && len(cfg.Repos.Channels) == 0 {
		return nil, nil
	}
	hosts := map[string]string{}
	if cfg.Git.URL != "" {
		hosts[cfg.Git.Host] = cfg.Git.URL
	}
	r, err := repo.New(repo.Config{CacheDir: cfg.Repos.CacheDir, Token: cfg.Git.Token, Hosts: hosts, Allow: repo.Allowlist(cfg.Repos.Allow)})
	if err != nil {
		return nil, err
	}
	return &repoWorkspace{
		repos: r, forge: &repo.GitHub{APIURL: cfg.Git.GitHubAPIURL, Token: cfg.Git.Token},
		sel: repo.Selection{Default: cfg.Repos.Default, Channels: cfg.Repos.Channels, DefaultHost: cfg.Git.Host},
		who: repo.Identity{Name: cfg.Git.CommitName, Email: cfg.Git.CommitEmail},
	}, nil
}

// repoWorkspace adapts agentpool/repo to the pool's Workspace: the thread's channel picks the
// repository, and repository failures carry their words for the user.
type repoWorkspace struct {
	repos *repo.Repos
	forge repo.Forge
	sel   repo.Selection
	who   repo.Identity
}

func (w *repoWorkspace) Prepare(ctx context.Context, sb sandbox.Sandbox, t agentpool.WorkspaceThread) (string, error) {
	spec, ok, err := w.sel.For(t.ChannelID)
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
			return note, nil
		}
	}
	if text := repo.UserText(err, spec); text != "" {
		return "", &agentpool.WorkspaceError{Text: text, Err: err}
	}
	return "", err // the sandbox's or ours: the bot explains it by code
}

// Push implements agentpool.WorkspacePusher: the thread's branch goes to the forge and its pull
// request is opened or updated.
func (w *repoWorkspace) Push(ctx context.Context, sb sandbox.Sandbox, t agentpool.WorkspaceThread) (string, error) {
	spec, ok, err := w.sel.For(t.ChannelID)
	if err == nil && !ok {
		return "", agentpool.ErrNoWorkspace
	}
	if err == nil {
		var note string
		if note, err = w.repos.Deliver(ctx, sb, spec, t.ThreadKey, w.forge); err == nil {
			return note, nil
		}
	}
	if text := repo.UserText(err, spec); text != "" {
		return "", &agentpool.WorkspaceError{Text: text, Err: err}
	}
	return "", err
}

// Describe implements agentpool.WorkspaceDescriber for status.
func (w *repoWorkspace) Describe(ctx context.Context, t agentpool.WorkspaceThread) string {
	spec, ok, err := w.sel.For(t.ChannelID)
	if err != nil || !ok {
		return ""
	}
	line := fmt.Sprintf("Repository: %s, branch %s", spec.Host+"/"+spec.FullName(), repo.ThreadBranch(t.ThreadKey))
	// git updates refs atomically, so reading one while a fetch or push runs is safe.
	if last := w.repos.LastPushed(ctx, spec, t.ThreadKey); last != "" {
		return line + ", last pushed " + last[:12]
	}
	return line + ", not pushed yet"
}
