package repo_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/repo"
	"github.com/threadbox/threadbox/agentpool/repo/githubfake"
)

// TestGitHubEnsurePullRequest: the first call opens the pull request, the second finds and updates
// it; the fake records both, with the token as a bearer; a bad token or an unknown repository is
// ErrForge with GitHub's own words.
func TestGitHubEnsurePullRequest(t *testing.T) {
	fake := githubfake.New(t, "ghtoken", "acme/app")
	gh := &repo.GitHub{APIURL: fake.URL(), Token: "ghtoken"}
	spec := repo.Spec{Host: "github.com", Owner: "acme", Name: "app"}
	req := repo.PRRequest{Spec: spec, Head: "threadbox/abc", Base: "main", Title: "Threadbox: fix it", Body: "first"}

	pr, err := gh.EnsurePullRequest(t.Context(), req)
	require.NoError(t, err)
	require.True(t, pr.Created)
	require.Equal(t, 1, pr.Number)
	require.Equal(t, "https://github.example/acme/app/pull/1", pr.URL)

	req.Body = "second"
	again, err := gh.EnsurePullRequest(t.Context(), req)
	require.NoError(t, err)
	require.False(t, again.Created)
	require.Equal(t, pr.Number, again.Number)

	pulls := fake.Pulls()
	require.Len(t, pulls, 1, "one pull request, updated")
	require.Equal(t, "second", pulls[0].Body)
	require.Equal(t, "threadbox/abc", pulls[0].Head)
	var seq []string
	for _, c := range fake.Calls() {
		seq = append(seq, c.Method+" "+c.Path)
	}
	require.Equal(t, []string{
		"GET /repos/acme/app/pulls", "POST /repos/acme/app/pulls",
		"GET /repos/acme/app/pulls", "PATCH /repos/acme/app/pulls/1",
	}, seq)

	tests := []struct {
		name  string
		token string
		spec  repo.Spec
		words string
	}{
		{"bad token", "nope", spec, "Bad credentials"},
		{"unknown repository", "ghtoken", repo.Spec{Host: "github.com", Owner: "acme", Name: "nope"}, "Not Found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &repo.GitHub{APIURL: fake.URL(), Token: tc.token}
			_, err := g.EnsurePullRequest(t.Context(), repo.PRRequest{Spec: tc.spec, Head: "threadbox/x", Base: "main", Title: "t"})
			require.ErrorIs(t, err, repo.ErrForge)
			require.ErrorContains(t, err, tc.words)
		})
	}
}
