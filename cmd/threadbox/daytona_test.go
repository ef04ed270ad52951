package main

import (
	"bytes"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestDoctorChecksDaytona: doctor checks Daytona's reachability, the key and the snapshot, with one
// fix per problem.
func TestDoctorChecksDaytona(t *testing.T) {
	f := daytonafake.New(t, daytonafake.Options{Backend: sandboxfake.New(), Snapshots: []string{"tb-snapshot"}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String() + "/api"
	require.NoError(t, l.Close())

	for _, tc := range []struct {
		name, url, key, snapshot string
		want                     string // the doctor line about Daytona
	}{
		{"healthy", f.APIURL(), daytonafake.APIKey, "tb-snapshot", "ok      daytona: API at " + f.APIURL() + " accepts the key"},
		{"bad key", f.APIURL(), "nope", "tb-snapshot", "PROBLEM daytona: daytona API key refused"},
		{"missing snapshot", f.APIURL(), daytonafake.APIKey, "other", "PROBLEM daytona: daytona snapshot not usable: other does not exist"},
		{"unreachable", dead, daytonafake.APIKey, "tb-snapshot", "PROBLEM daytona: daytona API unreachable at " + dead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runMain(t, baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=daytona",
				"THREADBOX_SANDBOX_DAYTONA_API_URL="+tc.url, "THREADBOX_SANDBOX_DAYTONA_API_KEY="+tc.key,
				"THREADBOX_SANDBOX_DAYTONA_SNAPSHOT="+tc.snapshot), "doctor")
			line := findLine(out, tc.want)
			require.NotEmpty(t, line, "want a line starting %q in:\n%s", tc.want, out)
			if tc.name == "healthy" {
				require.NoError(t, err)
				return
			}
			require.Equal(t, exitCode(1), err)
			require.Contains(t, line, "Fix: ")
		})
	}
	require.Empty(t, f.Violations())
}

// TestDaytonaIsWired: sandbox.provider daytona builds the Daytona provider from sandbox.daytona, and
// the handles it makes name it.
func TestDaytonaIsWired(t *testing.T) {
	f := daytonafake.New(t, daytonafake.Options{Backend: sandboxfake.New(), Snapshots: []string{"tb-snapshot"}})
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=daytona",
		"THREADBOX_SANDBOX_DAYTONA_API_URL="+f.APIURL(), "THREADBOX_SANDBOX_DAYTONA_API_KEY="+daytonafake.APIKey,
		"THREADBOX_SANDBOX_DAYTONA_SNAPSHOT=tb-snapshot", "THREADBOX_DEPLOYMENT=wired"))
	require.NoError(t, m.ParseFlags([]string{"doctor"}))
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	p, warning, err := m.newProvider(t.Context())
	require.NoError(t, err)
	require.Empty(t, warning)
	require.Equal(t, "daytona", p.Name())
	h, err := p.Create(t.Context(), sandbox.Spec{Image: "ignored: the snapshot wins", Labels: sandbox.Labels{Thread: "t"}})
	require.NoError(t, err)
	require.Equal(t, "daytona", h.Provider)
	list, err := p.List(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, list, 1, "the deployment fence finds it")
	require.Equal(t, "wired", list[0].Labels[sandbox.LabelDeployment])
	require.Equal(t, "tb-snapshot", list[0].Image)
	require.NoError(t, p.Destroy(t.Context(), h))
	require.Empty(t, f.Violations())
}

// TestProvidersAreWired: sandbox.providers builds every enabled provider, the default first, and
// doctor checks each of them.
func TestProvidersAreWired(t *testing.T) {
	f := daytonafake.New(t, daytonafake.Options{Backend: sandboxfake.New(), Snapshots: []string{"tb-snapshot"}})
	env := baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=local", "THREADBOX_SANDBOX_PROVIDERS=local,daytona",
		"THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true", "THREADBOX_SANDBOX_LOCAL_DIR="+t.TempDir(),
		"THREADBOX_SANDBOX_DAYTONA_API_URL="+f.APIURL(), "THREADBOX_SANDBOX_DAYTONA_API_KEY="+daytonafake.APIKey,
		"THREADBOX_SANDBOX_DAYTONA_SNAPSHOT=tb-snapshot")
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, env)
	require.NoError(t, m.ParseFlags([]string{"doctor"}))
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	provs, warning, err := m.newProviders(t.Context())
	require.NoError(t, err)
	require.Equal(t, noIsolationWarning, warning, "the local provider's warning is kept")
	names := make([]string, len(provs))
	for i, p := range provs {
		names[i] = p.Name()
	}
	require.Equal(t, []string{"local", "daytona"}, names)

	out, _, _ := runMain(t, env, "doctor")
	require.NotEmpty(t, findLine(out, "ok      providers: enabled: local, daytona (default local)"), out)
	require.NotEmpty(t, findLine(out, "ok      sandbox: local provider"), out)
	require.NotEmpty(t, findLine(out, "ok      daytona: API at "+f.APIURL()), out)
	require.Empty(t, f.Violations())
}
