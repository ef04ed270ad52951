package repo

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Spec
		ok   bool
	}{
		{"acme/app", Spec{Host: "github.com", Owner: "acme", Name: "app"}, true},
		{"acme/app@main", Spec{Host: "github.com", Owner: "acme", Name: "app", Branch: "main"}, true},
		{"acme/app.git", Spec{Host: "github.com", Owner: "acme", Name: "app"}, true},
		{"GHE.example.com/acme/app@release/1.2", Spec{Host: "ghe.example.com", Owner: "acme", Name: "app", Branch: "release/1.2"}, true},
		{"127.0.0.1:8080/acme/app", Spec{Host: "127.0.0.1:8080", Owner: "acme", Name: "app"}, true},
		{"https://GitHub.com/acme/app/", Spec{Host: "github.com", Owner: "acme", Name: "app"}, true},
		{"http://ghe.example.com/acme/app.git@dev", Spec{Host: "ghe.example.com", Owner: "acme", Name: "app", Branch: "dev"}, true},
		{"http://ghe.example.com/acme/app@dev", Spec{Host: "ghe.example.com", Owner: "acme", Name: "app", Branch: "dev"}, true},
		{"ftp://github.com/acme/app", Spec{}, false},
		{"app", Spec{}, false},
		{"a/b/c/d", Spec{}, false},
		{"acme/../etc", Spec{}, false},
		{"acme/app@", Spec{}, false},
		{"acme/app@-f", Spec{}, false},
		{"acme/app@a..b", Spec{}, false},
		{"acme/app@x y", Spec{}, false},
		{"-acme/app", Spec{}, false},
		{"acme/app;rm", Spec{}, false},
		// The host names a cache directory: no dot segments, no option-like or over-long host.
		{"../acme/app", Spec{}, false},
		{"./acme/app", Spec{}, false},
		{"https://../acme/app", Spec{}, false},
		{"a..b/acme/app", Spec{}, false},
		{"-oProxyCommand=x/acme/app", Spec{}, false},
		{".github.com/acme/app", Spec{}, false},
		{strings.Repeat("a", 254) + "/acme/app", Spec{}, false},
		{"github.com:99999999/acme/app", Spec{}, false},
		// ".git" ends the repository's name, never its branch: feature.git is a branch of its own.
		{"acme/app@feature.git", Spec{Host: "github.com", Owner: "acme", Name: "app", Branch: "feature.git"}, true},
		{"acme/app.git@feature.git", Spec{Host: "github.com", Owner: "acme", Name: "app", Branch: "feature.git"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in, "github.com")
			if !tc.ok {
				require.ErrorIs(t, err, ErrInvalidSpec)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestAllowlist(t *testing.T) {
	list := Allowlist{"github.com/acme", "github.com/other/one", "ghe.example.com/team/*"}
	tests := []struct {
		spec Spec
		ok   bool
	}{
		{Spec{Host: "github.com", Owner: "acme", Name: "anything"}, true},
		{Spec{Host: "github.com", Owner: "ACME", Name: "app"}, true},
		{Spec{Host: "github.com", Owner: "other", Name: "one"}, true},
		{Spec{Host: "github.com", Owner: "other", Name: "two"}, false},
		{Spec{Host: "ghe.example.com", Owner: "team", Name: "x"}, true},
		{Spec{Host: "gitlab.com", Owner: "acme", Name: "app"}, false},
		{Spec{Host: "github.com", Owner: "acme-evil", Name: "app"}, false},
	}
	for _, tc := range tests {
		err := list.Check(tc.spec)
		if tc.ok {
			require.NoError(t, err, tc.spec)
		} else {
			require.ErrorIs(t, err, ErrNotAllowed, tc.spec)
		}
	}
	require.ErrorIs(t, Allowlist(nil).Check(Spec{Host: "github.com", Owner: "acme", Name: "app"}), ErrNotAllowed, "empty allows nothing")
}

func TestThreadBranch(t *testing.T) {
	a, b := ThreadBranch("slack:T:C:1.1"), ThreadBranch("slack:T:C:1.2")
	require.NotEqual(t, a, b)
	require.Equal(t, a, ThreadBranch("slack:T:C:1.1"), "stable")
	require.True(t, strings.HasPrefix(a, BranchPrefix))
	require.True(t, ValidBranch(a))
	require.Len(t, a, len(BranchPrefix)+10)
}

// A pasted clone URL may carry credentials, and a message may be huge: the error (which the bot
// logs) must carry neither.
func TestParseErrorDoesNotEchoTheInput(t *testing.T) {
	for _, in := range []string{
		"https://x-access-token:ghp_SECRET123@github.com/acme/app",
		"https://ghp_SECRET123@github.com/acme/app",
		"acme/app@ghp_SECRET123 x",
		strings.Repeat("acme/app", 100_000),
	} {
		_, err := Parse(in, "github.com")
		require.ErrorIs(t, err, ErrInvalidSpec)
		require.NotContains(t, err.Error(), "SECRET")
		require.Less(t, len(err.Error()), 300)
	}
}

// git.host as the operator wrote it (GHE.Example.com) names the same forge as the host a user
// types or Parse lowers: its git.url and its token apply to both spellings.
func TestHostCaseDoesNotChangeTheForge(t *testing.T) {
	r, err := New(Config{CacheDir: t.TempDir(), Token: "tok", TokenHost: "GHE.Example.com",
		Hosts: map[string]string{"GHE.Example.com": "https://ghe.internal:8443/git"}})
	require.NoError(t, err)
	for _, in := range []string{"ghe.example.com/acme/app", "acme/app"} {
		s, err := Parse(in, "GHE.Example.com")
		require.NoError(t, err)
		require.Equal(t, "ghe.example.com", s.Host, in)
		require.Equal(t, "https://ghe.internal:8443/git/acme/app.git", r.URL(s), in)
	}
	require.Equal(t, "https://ghe.internal:8443/git", r.git.tokenURL)
}
