package docker_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestNetworkFullIsOwnBridge: network full puts sandboxes on a bridge network of the deployment's
// own, never Docker's default bridge, with inter-container traffic off, labelled for the leak check.
// It lives as long as a sandbox (running or stopped) is on it. Checked through the Docker API only:
// nothing here sends traffic anywhere.
func TestNetworkFullIsOwnBridge(t *testing.T) {
	t.Parallel()
	p := dockertest.New(t, docker.Options{})
	raw := rawClient(t)
	ctx := t.Context()
	deployment := "dockertest-full-" + strings.ToLower(rand.Text()[:8])
	name := docker.NetworkName(deployment)
	spec := sandbox.Spec{Image: dockertest.Image(), Network: sandbox.NetworkFull,
		Labels: sandbox.Labels{Deployment: deployment, Thread: "t", Generation: 1}}
	t.Cleanup(func() { // only if the test failed half-way: the provider removes it itself
		_ = raw.NetworkRemove(context.Background(), name)
	})

	h1, err := p.Create(ctx, spec)
	require.NoError(t, err)
	spec.Labels.Thread = "t2"
	h2, err := p.Create(ctx, spec)
	require.NoError(t, err)

	nw, err := raw.NetworkInspect(ctx, name, network.InspectOptions{})
	require.NoError(t, err)
	require.Equal(t, "bridge", nw.Driver)
	require.Equal(t, "false", nw.Options[docker.ICCOption], "inter-container traffic off")
	require.False(t, nw.Internal, "full is outbound network")
	require.Equal(t, deployment, nw.Labels[sandbox.LabelDeployment])
	for _, h := range []sandbox.Handle{h1, h2} {
		c, err := raw.ContainerInspect(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, name, string(c.HostConfig.NetworkMode), "not the default bridge")
		require.Len(t, c.NetworkSettings.Networks, 1)
		require.Contains(t, c.NetworkSettings.Networks, name)
		info, err := p.Inspect(ctx, h)
		require.NoError(t, err)
		require.Equal(t, sandbox.NetworkFull, info.Network)
	}

	// A stopped sandbox keeps the network: destroying the other one leaves it, and the stopped one
	// starts again on it.
	require.NoError(t, p.Stop(ctx, h1))
	require.NoError(t, p.Destroy(ctx, h2))
	_, err = raw.NetworkInspect(ctx, name, network.InspectOptions{})
	require.NoError(t, err, "the network stays while a stopped sandbox is on it")
	require.NoError(t, p.Start(ctx, h1))
	require.Equal(t, "ok", sh(t, p, h1, "echo ok"))

	// The last one gone, the network goes too.
	require.NoError(t, p.Destroy(ctx, h1))
	_, err = raw.NetworkInspect(ctx, name, network.InspectOptions{})
	require.True(t, cerrdefs.IsNotFound(err), "the network is removed with its last sandbox: %v", err)
}

// A network of that name with inter-container traffic on is refused, not used.
func TestNetworkFullRefusesAnICCNetwork(t *testing.T) {
	t.Parallel()
	p := dockertest.New(t, docker.Options{})
	raw := rawClient(t)
	deployment := "dockertest-icc-" + strings.ToLower(rand.Text()[:8])
	name := docker.NetworkName(deployment)
	_, err := raw.NetworkCreate(t.Context(), name, network.CreateOptions{Driver: "bridge",
		Labels: map[string]string{sandbox.LabelDeployment: deployment}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, raw.NetworkRemove(ctx, name))
	})
	_, err = p.Create(t.Context(), sandbox.Spec{Image: dockertest.Image(), Network: sandbox.NetworkFull,
		Labels: sandbox.Labels{Deployment: deployment, Thread: "t", Generation: 1}})
	require.ErrorContains(t, err, "is not a bridge with com.docker.network.bridge.enable_icc=false")
	require.ErrorContains(t, err, "docker network rm "+name)
	left, err := raw.ContainerList(t.Context(), container.ListOptions{All: true})
	require.NoError(t, err)
	for _, c := range left {
		require.NotEqual(t, deployment, c.Labels[sandbox.LabelDeployment], "nothing left behind")
	}
}
