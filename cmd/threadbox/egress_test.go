package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/egress"
	"github.com/threadbox/threadbox/agentpool/gateway"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/cmd/threadbox/metrics"
	"github.com/threadbox/threadbox/sandbox"
)

// The gateway's forwarder relays egress only because both mount it at one path: egress recognises
// the gateway's command by it.
func TestForwarderPathsAgree(t *testing.T) {
	require.Equal(t, gateway.ForwarderPath, egress.ForwarderPath)
}

// TestNetworkMode: auto is restricted for an AI runtime behind the gateway on Docker, none
// otherwise; an explicit mode is kept; restricted sandboxes ask the provider for network none.
func TestNetworkMode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		network  string
		provider string
		key      bool
		gateway  bool
		want     string
		spec     sandbox.NetworkMode
	}{
		{"shell runtime", "auto", "docker", false, true, "none", sandbox.NetworkNone},
		{"AI runtime with the gateway", "auto", "docker", true, true, "restricted", sandbox.NetworkNone},
		{"AI runtime, provider auto", "auto", "auto", true, true, "restricted", sandbox.NetworkNone},
		{"AI runtime without the gateway", "auto", "docker", true, false, "none", sandbox.NetworkNone},
		{"AI runtime on daytona", "auto", "daytona", true, true, "none", sandbox.NetworkNone},
		{"explicit full", "full", "docker", true, true, "full", sandbox.NetworkFull},
		{"explicit restricted, shell", "restricted", "docker", false, true, "restricted", sandbox.NetworkNone},
		{"explicit none", "none", "docker", true, true, "none", sandbox.NetworkNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Main{Config: config.Loaded{Config: config.Default()}}
			m.Config.Sandbox.Network, m.Config.Sandbox.Provider, m.Config.Gateway.Enabled = tc.network, tc.provider, tc.gateway
			if tc.key {
				m.Environ = []string{"ANTHROPIC_API_KEY=sk-not-real"}
			}
			require.Equal(t, tc.want, m.networkMode())
			require.Equal(t, tc.spec, m.sandboxNetwork())
		})
	}
}

func TestEgressCounter(t *testing.T) {
	mx := metrics.New(nil, nil)
	mx.EgressCounter().Egress(egress.ResultRefusedHost)
	mx.EgressCounter().Egress(egress.ResultRefusedHost) // registered once, the same series
	n, err := testutil.GatherAndCount(mx.Registry(), "threadbox_egress_requests_total")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	families, err := mx.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "threadbox_egress_requests_total" {
			require.Equal(t, 2.0, f.GetMetric()[0].GetCounter().GetValue())
		}
	}
}
