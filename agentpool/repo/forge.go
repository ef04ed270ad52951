package repo

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// PullRequest is a forge's pull (or merge) request.
type PullRequest struct {
	Number int
	URL    string
	// Created is true when this call opened it, false when it already existed and was updated.
	Created bool
}

// PRRequest is what the bot asks of the forge after a push.
type PRRequest struct {
	Spec Spec
	// Head is the pushed branch; Base the branch it goes into.
	Head, Base  string
	Title, Body string
}

// Forge opens or updates pull requests. GitHub first; GitLab's merge requests fit the same shape.
type Forge interface {
	EnsurePullRequest(ctx context.Context, req PRRequest) (PullRequest, error)
}

// ErrForge is a forge API failure.
var ErrForge = errors.New("the forge's API failed")

// GitHub is the GitHub REST API (api.github.com, or GitHub Enterprise's /api/v3, or a fake).
type GitHub struct {
	// APIURL is git.github_api_url (default https://api.github.com).
	APIURL string
	Token  string
	// HTTPClient defaults to a client with a 30 s timeout.
	HTTPClient *http.Client
}

var _ Forge = (*GitHub)(nil)

type ghPull struct {
	Number  int    `json:"number"`
	HTMLURL string `json:"html_url"`
}

// EnsurePullRequest finds the open pull request from Head into Base and updates its body, or opens
// one.
func (g *GitHub) EnsurePullRequest(ctx context.Context, req PRRequest) (PullRequest, error) {
	repoPath := "/repos/" + url.PathEscape(req.Spec.Owner) + "/" + url.PathEscape(req.Spec.Name) + "/pulls"
	q := url.Values{"state": {"open"}, "head": {req.Spec.Owner + ":" + req.Head}, "base": {req.Base}}
	var open []ghPull
	if err := g.call(ctx, http.MethodGet, repoPath+"?"+q.Encode(), nil, &open); err != nil {
		return PullRequest{}, err
	}
	if len(open) > 0 {
		var pr ghPull
		if err := g.call(ctx, http.MethodPatch, fmt.Sprintf("%s/%d", repoPath, open[0].Number), map[string]string{"body": req.Body}, &pr); err != nil {
			return PullRequest{}, err
		}
		return PullRequest{Number: pr.Number, URL: pr.HTMLURL}, nil
	}
	var pr ghPull
	body := map[string]any{"title": req.Title, "head": req.Head, "base": req.Base, "body": req.Body}
	if err := g.call(ctx, http.MethodPost, repoPath, body, &pr); err != nil {
		return PullRequest{}, err
	}
	return PullRequest{Number: pr.Number, URL: pr.HTMLURL, Created: true}, nil
}

func (g *GitHub) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	base := strings.TrimRight(cmp.Or(g.APIURL, "https://api.github.com"), "/")
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrForge, err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("Authorization", "Bearer "+g.Token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := g.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrForge, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrForge, method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		return fmt.Errorf("%w: %s %s: HTTP %d: %s", ErrForge, method, path, resp.StatusCode, cmp.Or(e.Message, strings.TrimSpace(string(data))))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%w: %s %s: %w", ErrForge, method, path, err)
		}
	}
	return nil
}
