package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/threadbox/threadbox/sandbox/daytona/internal/api"
)

// What Check can find wrong, so that doctor can say how to fix each.
var (
	// ErrUnreachable: the API did not answer.
	ErrUnreachable = errors.New("daytona API unreachable")
	// ErrBadKey: the API refused the key.
	ErrBadKey = errors.New("daytona API key refused")
	// ErrNoSnapshot: the snapshot is missing or not usable.
	ErrNoSnapshot = errors.New("daytona snapshot not usable")
)

// Check verifies that the API answers, that it accepts the key, and that snapshot (empty: the
// provider's) exists and is active. It says what it found, for doctor.
func (p *Provider) Check(ctx context.Context, snapshot string) (string, error) {
	if snapshot == "" {
		snapshot = p.opts.Snapshot
	}
	var key api.ApiKeyList
	err := p.once(ctx, "current api key", func(ctx context.Context) (*http.Response, error) {
		return p.api.GetCurrentApiKey(ctx, nil)
	}, &key)
	switch s := statusOf(err); {
	case isTransport(err):
		return "", fmt.Errorf("%w at %s: %w", ErrUnreachable, p.opts.APIURL, err)
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return "", fmt.Errorf("%w: %w", ErrBadKey, err)
	case err != nil:
		return "", fmt.Errorf("%w at %s: %w", ErrUnreachable, p.opts.APIURL, err)
	}
	var snap api.SnapshotDto
	err = p.once(ctx, "snapshot "+snapshot, func(ctx context.Context) (*http.Response, error) {
		return p.api.GetSnapshot(ctx, snapshot, nil)
	}, &snap)
	switch {
	case statusOf(err) == http.StatusNotFound:
		return "", fmt.Errorf("%w: %s does not exist", ErrNoSnapshot, snapshot)
	case err != nil:
		return "", fmt.Errorf("%w: %s: %w", ErrNoSnapshot, snapshot, err)
	case snap.State != api.SnapshotStateActive:
		return "", fmt.Errorf("%w: %s is %s, not active", ErrNoSnapshot, snapshot, snap.State)
	}
	return fmt.Sprintf("API at %s accepts the key (%s); snapshot %s is active", p.opts.APIURL, key.Name, snapshot), nil
}
