package sandbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func lookupFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvPolicyResolve(t *testing.T) {
	host := map[string]string{
		"GITHUB_TOKEN": "gh", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "aws", "DATABASE_URL": "pg://",
		"SLACK_BOT_TOKEN": "xoxb", "ANTHROPIC_API_KEY": "sk-ant", "CUSTOM_SECRET": "c", "MY_PRIVATE_KEY": "k",
	}
	tests := []struct {
		name        string
		policy      EnvPolicy
		want        map[string]string
		wantBlocked []string
	}{
		{
			name:   "passthrough copies only listed, present vars",
			policy: EnvPolicy{Passthrough: []string{"GITHUB_TOKEN", "ABSENT"}},
			want:   map[string]string{"GITHUB_TOKEN": "gh"},
		},
		{
			name:        "default blocklist beats passthrough",
			policy:      EnvPolicy{Passthrough: []string{"AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "SLACK_BOT_TOKEN", "ANTHROPIC_API_KEY", "MY_PRIVATE_KEY", "HOME"}},
			want:        map[string]string{"HOME": "/root"},
			wantBlocked: []string{"ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "MY_PRIVATE_KEY", "SLACK_BOT_TOKEN"},
		},
		{
			name:        "blocked beats set",
			policy:      EnvPolicy{Set: map[string]string{"CUSTOM_SECRET": "x", "JWT_SECRET": "y", "TZ": "UTC"}, Blocked: []string{"CUSTOM_*"}},
			want:        map[string]string{"TZ": "UTC"},
			wantBlocked: []string{"CUSTOM_SECRET", "JWT_SECRET"},
		},
		{
			name:   "set overrides passthrough",
			policy: EnvPolicy{Passthrough: []string{"HOME"}, Set: map[string]string{"HOME": "/workspace"}},
			want:   map[string]string{"HOME": "/workspace"},
		},
		{
			name:        "duplicates merge",
			policy:      EnvPolicy{Passthrough: []string{"HOME", "HOME"}, Blocked: []string{"DATABASE_URL", "DATABASE_URL"}, Set: map[string]string{"DATABASE_URL": "x"}},
			want:        map[string]string{"HOME": "/root"},
			wantBlocked: []string{"DATABASE_URL"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, blocked, err := tt.policy.Resolve(lookupFrom(host))
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.wantBlocked, blocked)
		})
	}
}

func TestEnvPolicyRejectsBadNames(t *testing.T) {
	for _, p := range []EnvPolicy{
		{Passthrough: []string{"GH_*"}},
		{Passthrough: []string{"1ABC"}},
		{Set: map[string]string{"A-B": "x"}},
		{Blocked: []string{"[unclosed"}},
	} {
		_, _, err := p.Resolve(lookupFrom(nil))
		require.Error(t, err, "%+v", p)
	}
}

func TestSpecNormalize(t *testing.T) {
	base := Spec{Image: "img", Labels: Labels{Deployment: "d", Thread: "t"}}
	t.Run("defaults", func(t *testing.T) {
		s, err := base.Normalize()
		require.NoError(t, err)
		require.Equal(t, DefaultUser, s.User)
		require.Equal(t, DefaultWorkDir, s.WorkDir)
		require.Equal(t, NetworkNone, s.Network)
		require.Equal(t, DefaultResources(), s.Resources)
	})
	t.Run("blocked env dropped even when hand-built", func(t *testing.T) {
		s := base
		s.Env = map[string]string{"AWS_SECRET_ACCESS_KEY": "x", "MINE": "y", "OK": "z"}
		s.BlockedEnv = []string{"MINE"}
		s, err := s.Normalize()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"OK": "z"}, s.Env)
	})
	bad := []struct {
		name string
		mod  func(*Spec)
	}{
		{"no image", func(s *Spec) { s.Image = "" }},
		{"no deployment", func(s *Spec) { s.Labels.Deployment = "" }},
		{"no thread", func(s *Spec) { s.Labels.Thread = "" }},
		{"root by name", func(s *Spec) { s.User = "root" }},
		{"root by uid", func(s *Spec) { s.User = "0:0" }},
		{"relative workdir", func(s *Spec) { s.WorkDir = "work" }},
		{"bad network", func(s *Spec) { s.Network = "bridge" }},
		{"bad memory", func(s *Spec) { s.Resources = DefaultResources(); s.Resources.MemoryMB = 1 }},
		{"bad env name", func(s *Spec) { s.Env = map[string]string{"A B": "x"} }},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			tt.mod(&s)
			_, err := s.Normalize()
			require.ErrorIs(t, err, ErrInvalidSpec)
		})
	}
	t.Run("root allowed when asked", func(t *testing.T) {
		s := base
		s.User, s.AllowRoot = "root", true
		_, err := s.Normalize()
		require.NoError(t, err)
	})
}

func TestLabelsRoundTrip(t *testing.T) {
	l := Labels{Deployment: "prod", Thread: "slack:T:C:1.2", Generation: 7}
	require.Equal(t, l, ParseLabels(l.Map()))
	require.Equal(t, Labels{Deployment: "x"}, ParseLabels(map[string]string{LabelDeployment: "x", LabelGeneration: "nan"}))
}

func TestCappedWriter(t *testing.T) {
	var buf []byte
	w := NewCappedWriter(writerFunc(func(p []byte) (int, error) { buf = append(buf, p...); return len(p), nil }), 5)
	n, err := w.Write([]byte("abc"))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.False(t, w.Truncated())
	n, err = w.Write([]byte("defgh"))
	require.NoError(t, err)
	require.Equal(t, 5, n, "reports everything written so the pipe keeps draining")
	require.True(t, w.Truncated())
	require.Equal(t, "abcde", string(buf))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestSpecMountsMustBeAbsolute: a relative mount path would be resolved against whatever directory
// the daemon or the image happens to use.
func TestSpecMountsMustBeAbsolute(t *testing.T) {
	tests := []struct {
		name  string
		mount Mount
		ok    bool
	}{
		{"absolute", Mount{Source: "/a", Target: "/b"}, true},
		{"relative source", Mount{Source: "a", Target: "/b"}, false},
		{"relative target", Mount{Source: "/a", Target: "b"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Spec{Image: "i", Labels: Labels{Deployment: "d", Thread: "t", Generation: 1}, Mounts: []Mount{tc.mount}}.Normalize()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalidSpec)
			}
		})
	}
}

// TestDefaultBlockedModelCredentials: the credentials of the model providers and agent CLIs the
// runtimes use never enter a sandbox, even when an operator passes them through by mistake.
func TestDefaultBlockedModelCredentials(t *testing.T) {
	names := []string{
		"CLAUDE_CODE_OAUTH_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "AZURE_OPENAI_API_KEY", "MISTRAL_API_KEY",
		"GROQ_API_KEY", "XAI_API_KEY", "DEEPSEEK_API_KEY", "COHERE_API_KEY", "TOGETHER_API_KEY",
		"FIREWORKS_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GOOGLE_GENERATIVE_AI_API_KEY",
	}
	host := map[string]string{}
	for _, n := range names {
		host[n] = "secret"
	}
	got, blocked, err := EnvPolicy{Passthrough: names}.Resolve(lookupFrom(host))
	require.NoError(t, err)
	require.Empty(t, got)
	require.ElementsMatch(t, names, blocked)
}
