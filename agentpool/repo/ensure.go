package repo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
)

// Selection is which repository a thread gets: repos.channels.<channel>, else repos.default, else
// none.
type Selection struct {
	Default  string
	Channels map[string]string
	// DefaultHost fills owner/name (default github.com).
	DefaultHost string
}

// For is the repository of a channel's threads; ok is false when there is none.
func (s Selection) For(channel string) (spec Spec, ok bool, err error) {
	text := s.Channels[channel]
	if text == "" {
		text = s.Default
	}
	if text == "" {
		return Spec{}, false, nil
	}
	host := s.DefaultHost
	if host == "" {
		host = "github.com"
	}
	spec, err = Parse(text, host)
	return spec, err == nil, err
}

// markerPath is where a sandbox records the checkout it holds (relative to its working directory),
// so a resumed sandbox is not filled twice and a new one is.
const markerPath = ".threadbox/repo.json"

// Ensure gives the sandbox the thread's repository unless it already holds it: the branch is
// ThreadBranch(threadKey), and a branch pushed before comes back. note tells the user what
// happened ("" when nothing did).
func (r *Repos) Ensure(ctx context.Context, sb sandbox.Sandbox, spec Spec, threadKey string, who Identity) (note string, err error) {
	// The marker, or any repository already there (the agent may have cleaned .threadbox/ away with
	// git clean -x): a checkout never goes over a working tree, which would overwrite the work.
	for _, p := range []string{markerPath, ".git/HEAD"} {
		if _, err := sb.ReadFile(ctx, p, 64<<10); err == nil {
			return "", nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("repo: reading %s: %w", p, err)
		}
	}
	co, err := r.Prepare(ctx, sb, spec, ThreadBranch(threadKey), who)
	if err != nil {
		return "", err
	}
	mark, _ := json.Marshal(marker{Repo: spec.String(), Branch: co.Branch, Base: co.Base, BaseBranch: co.BaseBranch})
	if err := sb.WriteFile(ctx, markerPath, mark, 0o644); err != nil {
		return "", fmt.Errorf("repo: writing %s: %w", markerPath, err)
	}
	if co.Restored {
		return fmt.Sprintf("(Checked out %s on branch %s, restored from its last push %s: commits not pushed before this sandbox was replaced are gone.)",
			spec.Host+"/"+spec.FullName(), co.Branch, short(co.Base)), nil
	}
	return fmt.Sprintf("(Checked out %s (%s at %s) on branch %s.)", spec.Host+"/"+spec.FullName(), co.BaseBranch, short(co.Base), co.Branch), nil
}

// UserText words a repository failure for the chat user ("" for one that is not the user's or the
// forge's doing: the bot then explains it by code).
func UserText(err error, spec Spec) string {
	name := spec.Host + "/" + spec.FullName()
	switch {
	case errors.Is(err, ErrInvalidSpec):
		return "That is not a repository I can use: write owner/name or owner/name@branch."
	case errors.Is(err, ErrNotAllowed):
		return fmt.Sprintf("%s is not on this bot's list of allowed repositories (repos.allow); ask an operator to add it.", name)
	case errors.Is(err, ErrNotFound):
		return fmt.Sprintf("I could not find %s (or its branch %q), or the bot's token may not read it. Check the name.", name, spec.Branch)
	case errors.Is(err, ErrFetch):
		return fmt.Sprintf("I could not fetch %s from the forge just now. Try again in a minute; if it keeps failing, tell an operator.", name)
	case errors.Is(err, ErrBranchRefused):
		return "I only push branches named threadbox/…, never anything else."
	case errors.Is(err, ErrNothingToPush):
		return "There is nothing new to push: commit the change on the thread's branch first."
	case errors.Is(err, ErrPushRejected):
		return fmt.Sprintf("%s refused the push (a protected branch, or the branch moved on the forge). Nothing was overwritten.", name)
	case errors.Is(err, ErrOtherCheckout):
		return fmt.Sprintf("This sandbox still holds the checkout of the thread's previous repository, not %s, so nothing was pushed: the thread moved, and its new sandbox is not up yet.", name)
	case errors.Is(err, ErrBadBundle):
		return "I could not take the thread's branch out of the sandbox intact, so nothing was pushed."
	case errors.Is(err, ErrForge):
		return "The push went through, but the forge's API failed to open or update the pull request. Try push again later."
	}
	return ""
}

// marker is what markerPath holds.
type marker struct {
	Repo       string `json:"repo"`
	Branch     string `json:"branch"`
	Base       string `json:"base"`
	BaseBranch string `json:"base_branch"`
}

// Deliver pushes the thread's branch from the sandbox and opens or updates its pull request into
// the branch the thread started from. note is the reply, with the pull request's link.
func (r *Repos) Deliver(ctx context.Context, sb sandbox.Sandbox, spec Spec, threadKey string, forge Forge) (note string, err error) {
	raw, err := sb.ReadFile(ctx, markerPath, 64<<10)
	if err != nil {
		return "", fmt.Errorf("%w: no checkout in this sandbox: %w", ErrNothingToPush, err)
	}
	var m marker
	if err := json.Unmarshal(raw, &m); err != nil || m.BaseBranch == "" {
		return "", fmt.Errorf("%w: unreadable %s", ErrNothingToPush, markerPath)
	}
	// The thread may have moved to another repository while this sandbox, with the first one's
	// checkout, is still there: its branch is not the new repository's to receive.
	if got, _, _ := strings.Cut(m.Repo, "@"); !strings.EqualFold(got, spec.Host+"/"+spec.FullName()) {
		return "", fmt.Errorf("%w: the thread names %s", ErrOtherCheckout, spec)
	}
	branch := ThreadBranch(threadKey)
	pushed, err := r.Push(ctx, sb, spec, branch)
	if err != nil {
		return "", err
	}
	// Into the branch the thread started from as the bot knows it, not as the marker (a file the
	// agent can rewrite) says.
	into := spec.Branch
	if into == "" {
		if into, err = r.defaultBranch(ctx, r.cachePath(spec)); err != nil {
			return "", fmt.Errorf("pushed %s at %s, then: %w", branch, short(pushed.Commit), err)
		}
	}
	subject, _ := sandboxGit(ctx, sb, "log", "-1", "--format=%s", pushed.Commit)
	subject = shortSubject(subject)
	pr, err := forge.EnsurePullRequest(ctx, PRRequest{
		Spec: spec, Head: branch, Base: into,
		Title: "Threadbox: " + cmpOr(subject, branch),
		Body:  fmt.Sprintf("Pushed from a Threadbox thread.\n\nLatest commit: %s %s", short(pushed.Commit), subject),
	})
	if err != nil {
		return "", fmt.Errorf("pushed %s at %s, then: %w", branch, short(pushed.Commit), err)
	}
	verb := "Updated"
	if pr.Created {
		verb = "Opened"
	}
	return fmt.Sprintf("Pushed %s to %s (%s). %s pull request #%d: %s", short(pushed.Commit), branch, subject, verb, pr.Number, pr.URL), nil
}

// maxSubject bounds the commit subject quoted in the pull request's title (GitHub refuses titles
// over 256 characters) and in the reply: it is the agent's text, of any length.
const maxSubject = 200

// shortSubject is the subject as one line of valid UTF-8, cut to maxSubject characters.
func shortSubject(s string) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if r := []rune(s); len(r) > maxSubject {
		s = string(r[:maxSubject-1]) + "…"
	}
	return s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// LastPushed is the thread's branch's commit as the bot last saw it on the forge (its cache, after
// the last fetch or push; no network call), or "" when it was never pushed.
func (r *Repos) LastPushed(ctx context.Context, spec Spec, threadKey string) string {
	out, err := r.git.run(ctx, r.cachePath(spec), "rev-parse", "--verify", "--quiet", "refs/heads/"+ThreadBranch(threadKey)+"^{commit}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
