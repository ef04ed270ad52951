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
	if cfg.Provider == "local" {
		return "local", m.localAllowed()
	}
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
	if err := m.localAllowed(); err != nil {
		return "", fmt.Errorf("sandbox.provider auto: no Docker daemon answers, and %w", err)
	}
	if !cfg.Local.IUnderstandNoIsolation {
		return "", fmt.Errorf("sandbox.provider auto: no Docker daemon answers, and the local fallback needs " +
			"sandbox.local.i_understand_no_isolation: true (it runs agent commands on this host without isolation)")
	}
	m.Logger.Warn("USING THE LOCAL PROVIDER: agent commands run as processes on this host with NO ISOLATION")
	return "local", nil
}

// localAllowed refuses the local provider, which gives every user a shell on this host, whenever
// anyone but the person at this machine could reach the bot: a chat platform is configured, or the
// web chat listens beyond loopback.
func (m *Main) localAllowed() error {
	cfg := m.Config
	why := ""
	switch {
	case cfg.ChatPlatform() != "":
		why = cfg.ChatPlatform() + " is set"
	case !cfg.HTTP.Loopback():
		why = "http.addr " + cfg.HTTP.Addr + " is not loopback"
	default:
		return nil
	}
	return fmt.Errorf("the local provider (no isolation: agent commands run on this host) is refused because %s; "+
		"start Docker (or set sandbox.provider to docker, daytona or deno), or keep the local provider to a web chat on loopback", why)
}
