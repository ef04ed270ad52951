package logging

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

func TestRedactURLs(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "postgres://tb:s3cret-pw@db:5432/tb", "postgres://tb:xxxxx@db:5432/tb"},
		{"percent-encoded", "postgres://tb:p%40ss%2Fw%3Ard@db/tb?sslmode=disable", "postgres://tb:xxxxx@db/tb?sslmode=disable"},
		{"unencoded @ in the password", "postgres://tb:p@ss@db/tb", "postgres://tb:xxxxx@db/tb"},
		{"query password", "postgres://db/tb?sslmode=disable&password=hunter22&user=tb", "postgres://db/tb?sslmode=disable&password=xxxxx&user=tb"},
		{"query password first, any case", "postgres://db/tb?PassWord=hunter%2022", "postgres://db/tb?PassWord=xxxxx"},
		{"sslpassword", "postgres://db/tb?sslpassword=keypass", "postgres://db/tb?sslpassword=xxxxx"},
		{"in an error message", `open "redis://:r3dis-pw@cache:6379/0": refused`, `open "redis://:xxxxx@cache:6379/0": refused`},
		{"two URLs", "a://u:p1@h b://v:p2@k", "a://u:xxxxx@h b://v:xxxxx@k"},
		// libpq's key=value form, which operators paste into database.url and config errors quote.
		{"key=value password", "host=db user=tb password=hunter22 dbname=tb", "host=db user=tb password=xxxxx dbname=tb"},
		{"key=value password first", "password=hunter22 host=db", "password=xxxxx host=db"},
		{"key=value quoted password", `host=db password='hun ter\'22' dbname=tb`, "host=db password=xxxxx dbname=tb"},
		{"key=value in a quoted value", `database.url = "host=db password=hunter22": must start`, `database.url = "host=db password=xxxxx": must start`},
		{"user without password", "postgres://tb@db/tb", "postgres://tb@db/tb"},
		{"no URL", "deployment threadbox is ready", "deployment threadbox is ready"},
		{"a port is no password", "http://127.0.0.1:8080/api", "http://127.0.0.1:8080/api"},
		{"sqlite path", "sqlite:./data/threadbox.db", "sqlite:./data/threadbox.db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, RedactURLs(tc.in))
		})
	}
}

// TestOrdinaryWordsAreNotBlanked is the startup line of the test services, whose database user,
// password and name are all "threadbox", as is the deployment.
func TestOrdinaryWordsAreNotBlanked(t *testing.T) {
	const dbURL = "postgres://threadbox:threadbox@127.0.0.1:5432/threadbox_test?sslmode=disable"
	for _, tc := range []struct {
		name      string
		secrets   []string
		public    []string
		want      []string
		forbidden []string
	}{
		{
			name: "password equal to the user and deployment", secrets: []string{"threadbox"},
			public:    []string{"threadbox", "threadbox", "127.0.0.1", "threadbox_test"},
			want:      []string{`"deployment": "threadbox"`, `"thread": "slack:T1:C1:threadbox-1"`, "postgres://threadbox:xxxxx@127.0.0.1"},
			forbidden: []string{Redacted},
		},
		{
			name: "short values are not secrets", secrets: []string{"admin", "1", "true"},
			want: []string{`"deployment": "threadbox"`}, forbidden: []string{Redacted},
		},
		{
			name: "a real token is still redacted", secrets: []string{"xoxb-1234-abcdef", "threadbox"}, public: []string{"threadbox"},
			want: []string{`"deployment": "threadbox"`, `"token": "` + Redacted + `"`}, forbidden: []string{"xoxb-1234-abcdef"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, Options{Level: "info", Format: "console", Secrets: tc.secrets, Public: tc.public})
			require.NoError(t, err)
			log.Info("ready", zap.String("database", dbURL), zap.String("deployment", "threadbox"),
				zap.String("thread", "slack:T1:C1:threadbox-1"), zap.String("token", "xoxb-1234-abcdef"))
			out := buf.String()
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
			for _, f := range tc.forbidden {
				require.NotContains(t, out, f)
			}
			require.NotContains(t, out, "threadbox:threadbox@", "the URL password is redacted by place")
		})
	}
}
