package deno

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// Stop implements sandbox.Provider (pause): kill the sandbox, wait for its volume to detach,
// snapshot it, then delete the volume and the snapshot it came from. Paused, a box is one snapshot.
func (p *Provider) Stop(ctx context.Context, h sandbox.Handle) error {
	if _, err := p.decode(h); err != nil {
		return err
	}
	b, err := p.find(ctx, h.ID)
	if err != nil {
		return fmt.Errorf("deno: stop %s: %w", h.ID, err)
	}
	if !b.exists() {
		return fmt.Errorf("deno: stop %s: %w", h.ID, sandbox.ErrNotFound)
	}
	if b.running != nil {
		if err := p.killBox(ctx, h.ID, b.running); err != nil {
			return fmt.Errorf("deno: stop %s: %w", h.ID, err)
		}
	}
	vol := b.lastVolume()
	if vol == nil {
		return nil // already paused
	}
	snap := snapSlug(h.ID, vol.n)
	if err := p.snapshot(ctx, vol.slug, snap); err != nil {
		// The volume is kept: Start boots it again, Destroy removes it.
		return fmt.Errorf("deno: pause %s: %w", h.ID, err)
	}
	if err := p.deleteVolume(ctx, vol.slug); err != nil {
		return fmt.Errorf("deno: pause %s: %w", h.ID, err)
	}
	// Older generations: volumes first (they reference the snapshots), then snapshots.
	for _, v := range b.volumes {
		if v.n < vol.n {
			if err := p.deleteVolume(ctx, v.slug); err != nil {
				return fmt.Errorf("deno: pause %s: %w", h.ID, err)
			}
		}
	}
	for _, s := range b.snapshots {
		if s.n < vol.n {
			if err := p.deleteSnapshot(ctx, s.slug); err != nil {
				return fmt.Errorf("deno: pause %s: %w", h.ID, err)
			}
		}
	}
	return nil
}

// killBox kills the box's running sandbox and waits (bounded) for our socket to it to close.
func (p *Provider) killBox(ctx context.Context, id string, rec *sandboxRec) error {
	p.mu.Lock()
	lv := p.lives[id]
	p.mu.Unlock()
	if err := p.kill(ctx, rec.Region, rec.ID); err != nil {
		return err
	}
	if lv != nil && lv.conn.sandboxID == rec.ID {
		t := time.NewTimer(p.opts.KillTimeout)
		defer t.Stop()
		select {
		case <-lv.conn.done:
		case <-t.C:
			lv.conn.close()
		case <-ctx.Done():
			return ctx.Err()
		}
		p.forget(id, lv)
	}
	return nil
}

// snapshot snapshots a volume, retrying while it is still attached (a 500 right after the kill, seed
// 001), then waits until the job has finished. A snapshot whose job died is removed.
func (p *Provider) snapshot(ctx context.Context, vol, snap string) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.DetachTimeout)
	defer cancel()
	var rec snapshotRec
	err := p.poll(ctx, func() (bool, error) {
		_, err := p.do(ctx, "snapshot "+vol, http.MethodPost, p.console("/api/v2/volumes/"+vol+"/snapshot", nil), map[string]string{"slug": snap}, &rec, false, p.opts.RequestTimeout)
		switch {
		case err == nil:
			return true, nil
		case statusOf(err) == http.StatusConflict && codeOf(err) == "SLUG_ALREADY_EXISTS":
			return true, nil // an earlier attempt took it
		case transient(err):
			return false, err
		}
		return true, err
	})
	if err != nil {
		return err
	}
	err = p.poll(ctx, func() (bool, error) {
		_, err := p.do(ctx, "get snapshot "+snap, http.MethodGet, p.console("/api/v2/snapshots/"+snap, nil), nil, &rec, true, p.opts.RequestTimeout)
		if err != nil {
			return statusOf(err) == http.StatusNotFound, err
		}
		return rec.Bootable, nil
	})
	if err != nil {
		if derr := p.deleteSnapshot(context.WithoutCancel(ctx), snap); derr != nil {
			err = errors.Join(err, derr)
		}
		return fmt.Errorf("snapshot %s of %s: %w", snap, vol, err)
	}
	return nil
}

// poll calls f with backoff until it reports done or ctx ends (then the last error, or ctx's).
func (p *Provider) poll(ctx context.Context, f func() (done bool, err error)) error {
	// Fine-grained: a volume detaches within a second or so of the kill, and every step of a pause
	// waits for one such thing; a coarse backoff would add most of a step to each pause.
	delay := 10 * time.Millisecond
	for {
		done, err := f()
		if done {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if err != nil {
				return err
			}
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 250*time.Millisecond)
	}
}

// deleteVolume deletes a volume, waiting while it is attached (a sandbox just killed); a missing
// one is success.
func (p *Provider) deleteVolume(ctx context.Context, slug string) error {
	return p.deleteRes(ctx, "volume", "/api/v2/volumes/"+slug)
}

// deleteSnapshot deletes a snapshot, waiting while a volume made from it is being deleted; a missing
// one is success.
func (p *Provider) deleteSnapshot(ctx context.Context, slug string) error {
	return p.deleteRes(ctx, "snapshot", "/api/v2/snapshots/"+slug)
}

func (p *Provider) deleteRes(ctx context.Context, kind, path string) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.DetachTimeout)
	defer cancel()
	return p.poll(ctx, func() (bool, error) {
		_, err := p.do(ctx, "delete "+kind+" "+path, http.MethodDelete, p.console(path, nil), nil, nil, true, p.opts.RequestTimeout)
		switch {
		case err == nil || statusOf(err) == http.StatusNotFound:
			return true, nil
		case statusOf(err) == http.StatusConflict:
			return false, err // in use: wait for the detach
		}
		return true, err
	})
}
