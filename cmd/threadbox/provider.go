package main

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox/docker"
)

// chooseProvider resolves sandbox.provider "auto": Docker when a daemon answers, else the local
// provider, which still requires sandbox.local.i_understand_no_isolation (make run sets it).
func (m *Main) chooseProvider(ctx context.Context) (string, error) {
	cfg := m.Config.Sandbox
	if cfg.Provider != "auto" {
		return cfg.Provider, nil
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, _, err := docker.Probe(pctx, cfg.Docker.Host, ""); err == nil {
		return "docker", nil
	} else {
		m.Logger.Warn("no Docker daemon; considering the local provider", zap.Error(err))
	}
	if !cfg.Local.IUnderstandNoIsolation {
		return "", fmt.Errorf("sandbox.provider auto: no Docker daemon answers, and the local fallback needs " +
			"sandbox.local.i_understand_no_isolation: true (it runs agent commands on this host without isolation)")
	}
	m.Logger.Warn("USING THE LOCAL PROVIDER: agent commands run as processes on this host with NO ISOLATION")
	return "local", nil
}
