package agentpool

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// provEnv is one provider the acceptance tests run on, set up for one test: real Docker, or Daytona
// (its fake, every sandbox backed by a real Docker container). Issue 13 wants the pool's
// acceptance cases to hold on both.
type provEnv struct {
	name  string
	image string
	// open returns a provider fenced to deployment ("" for no fence). Every provider a test opens
	// shares one backend, so that one sees what another made.
	open func(t *testing.T, deployment string) sandbox.Provider
	// stopOutOfBand and removeOutOfBand change a sandbox behind the pool's back: docker stop and
	// docker rm -f, or Daytona's auto-stop and a delete from its dashboard.
	stopOutOfBand, removeOutOfBand func(t *testing.T, h sandbox.Handle)
	// stray makes a sandbox with exactly labels (none of ours unless given), which the provider's
	// Create would refuse to make; it is removed when the test ends.
	stray func(t *testing.T, labels map[string]string) sandbox.Handle
	// fake is Daytona's fake (nil on Docker).
	fake *daytonafake.Fake
}

// acceptanceEnvs are the providers the acceptance tests run on, each set up anew per test.
var acceptanceEnvs = []struct {
	name  string
	setup func(t *testing.T) provEnv
}{
	{docker.Name, dockerEnv},
	{daytona.Name, daytonaEnv},
}

// forEachProvider runs f as a subtest per provider.
func forEachProvider(t *testing.T, f func(t *testing.T, env provEnv)) {
	for _, e := range acceptanceEnvs {
		t.Run(e.name, func(t *testing.T) { f(t, e.setup(t)) })
	}
}

func dockerEnv(t *testing.T) provEnv {
	t.Helper()
	return provEnv{
		name: docker.Name, image: dockertest.Image(),
		open: func(t *testing.T, dep string) sandbox.Provider {
			return dockertest.New(t, docker.Options{Deployment: dep, StopTimeout: time.Second})
		},
		stopOutOfBand: func(t *testing.T, h sandbox.Handle) {
			dockerCLI(t, "stop", "-t", "1", h.ID)
		},
		removeOutOfBand: func(t *testing.T, h sandbox.Handle) {
			dockerCLI(t, "rm", "-f", "-v", h.ID)
		},
		stray: func(t *testing.T, labels map[string]string) sandbox.Handle {
			args := []string{"create", "--name", "tbx-stray-" + maintRandom()}
			for k, v := range labels {
				args = append(args, "--label", k+"="+v)
			}
			id := dockerCLI(t, append(args, dockertest.Image())...)
			t.Cleanup(func() { dockerCLI(t, "rm", "-f", id) })
			return sandbox.Handle{Provider: docker.Name, ID: id}
		},
	}
}

// daytonaEnv starts a Daytona fake on real Docker for one test. The fake fails the test if any
// request broke Daytona's specs.
func daytonaEnv(t *testing.T) provEnv {
	t.Helper()
	backend := dockertest.New(t, docker.Options{StopTimeout: time.Second})
	fake := daytonafake.New(t, daytonafake.Options{
		Backend: backend, Snapshots: []string{dockertest.Image()}, Deployment: "dtnfake-" + maintRandom(),
	})
	return provEnv{
		name: daytona.Name, image: dockertest.Image(), fake: fake,
		open: func(t *testing.T, dep string) sandbox.Provider {
			p, err := daytona.New(daytona.Options{
				APIURL: fake.APIURL(), APIKey: daytonafake.APIKey, Deployment: dep,
				StateTimeout: 2 * time.Minute, Logger: zaptest.NewLogger(t),
			})
			require.NoError(t, err)
			return p
		},
		stopOutOfBand: func(t *testing.T, h sandbox.Handle) {
			require.NoError(t, fake.StopOutOfBand(t.Context(), h.ID))
		},
		removeOutOfBand: func(t *testing.T, h sandbox.Handle) {
			require.NoError(t, fake.RemoveOutOfBand(t.Context(), h.ID))
		},
		stray: func(t *testing.T, labels map[string]string) sandbox.Handle {
			// Straight to the API, as a user of the dashboard or another tool would; the fake
			// removes it when it closes.
			return sandbox.Handle{Provider: daytona.Name, ID: daytonaRawCreate(t, fake, labels)}
		},
	}
}

// daytonaRawCreate creates a sandbox through Daytona's API without the provider, and returns its ID.
func daytonaRawCreate(t *testing.T, fake *daytonafake.Fake, labels map[string]string) string {
	t.Helper()
	req := map[string]any{"snapshot": dockertest.Image(), "networkBlockAll": true}
	if labels != nil { // the spec allows no null here
		req["labels"] = labels
	}
	body, err := json.Marshal(req)
	require.NoError(t, err)
	post, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fake.APIURL()+"/sandbox", bytes.NewReader(body))
	require.NoError(t, err)
	post.Header.Set("Authorization", "Bearer "+daytonafake.APIKey)
	post.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(post)
	require.NoError(t, err)
	defer resp.Body.Close()
	var sb struct {
		ID string `json:"id"`
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sb))
	require.NotEmpty(t, sb.ID)
	return sb.ID
}

// newProvFixture is newDockerFixture on env's provider: a pool on the shell runtime, fenced to a
// deployment of its own, whose sandboxes are destroyed when the test ends.
func newProvFixture(t *testing.T, st db.Store, env provEnv) provFixture {
	t.Helper()
	dep := "pooltest-" + randomSuffix()
	prov := env.open(t, dep)
	rt := &recordingRuntime{Runtime: shellrt.New()}
	f := newFixture(t, st, prov, rt, func(c *Config) { c.Deployment = dep; c.Image = env.image })
	t.Cleanup(func() { destroyDeployment(t, prov, dep) })
	return provFixture{fixture: f, env: env, deployment: dep, rt: rt}
}

type provFixture struct {
	fixture
	env        provEnv
	deployment string
	rt         *recordingRuntime
}

func (f provFixture) sandboxes(t *testing.T) []sandbox.Info {
	t.Helper()
	return deploymentSandboxes(t, f.prov, f.deployment)
}

// deploymentSandboxes lists the sandboxes labelled with deployment.
func deploymentSandboxes(t *testing.T, p sandbox.Provider, deployment string) []sandbox.Info {
	t.Helper()
	list, err := p.List(t.Context(), map[string]string{sandbox.LabelDeployment: deployment})
	require.NoError(t, err)
	return list
}

// provBox creates a real sandbox on p, destroyed when the test ends whatever the test did to it.
func provBox(t *testing.T, p sandbox.Provider, image, deployment, thread string) sandbox.Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := p.Create(ctx, sandbox.Spec{
		Image:     image,
		Labels:    sandbox.Labels{Deployment: deployment, Thread: thread, Generation: 1},
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 0.5, PIDs: 64, ExecTimeout: time.Minute},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		require.NoError(t, p.Destroy(ctx, h))
	})
	return h
}

// requireExists fails unless h is still there, in whatever state.
func requireExists(t *testing.T, p sandbox.Provider, h sandbox.Handle) {
	t.Helper()
	_, err := p.Inspect(t.Context(), h)
	require.NoError(t, err, "%s %s is still there", p.Name(), h.ID)
}
