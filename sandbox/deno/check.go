package deno

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// What Check can find wrong, so that doctor can say how to fix each.
var (
	// ErrUnreachable: the console did not answer, or answered 5xx (seed 001: an outage says nothing
	// about the token).
	ErrUnreachable = errors.New("deno console unreachable")
	// ErrNoSnapshot: the base snapshot is missing, not bootable, or in another region.
	ErrNoSnapshot = errors.New("deno base snapshot not usable")
)

// Check verifies that the console answers, that it accepts the token, and that the base snapshot
// exists, is bootable and lives in the configured region (volumes, snapshots and sandboxes are
// regional). It says what it found, for doctor.
func (p *Provider) Check(ctx context.Context) (string, error) {
	snap := p.opts.BaseSnapshot
	if snap == "" {
		return "", fmt.Errorf("%w: sandbox.deno.base_snapshot is not set", ErrNoSnapshot)
	}
	var rec snapshotRec
	_, err := p.do(ctx, "get snapshot "+snap, http.MethodGet, p.console("/api/v2/snapshots/"+snap, nil), nil, &rec, false, p.opts.RequestTimeout)
	var te *transportError
	switch s := statusOf(err); {
	case errors.As(err, &te) || s >= 500:
		return "", fmt.Errorf("%w at %s: %w", ErrUnreachable, p.opts.ConsoleURL, err)
	case errors.Is(err, ErrBadToken):
		return "", err
	case s == http.StatusNotFound:
		return "", fmt.Errorf("%w: %s does not exist", ErrNoSnapshot, snap)
	case err != nil:
		return "", fmt.Errorf("%w: %s: %w", ErrNoSnapshot, snap, err)
	case rec.Region != p.opts.Region:
		return "", fmt.Errorf("%w: %s is in region %s, sandbox.deno.region is %s", ErrNoSnapshot, snap, rec.Region, p.opts.Region)
	case !rec.Bootable:
		return "", fmt.Errorf("%w: %s is not bootable (its snapshot job may still run)", ErrNoSnapshot, snap)
	}
	return fmt.Sprintf("console at %s accepts the token; base snapshot %s is bootable in %s", p.opts.ConsoleURL, snap, p.opts.Region), nil
}
