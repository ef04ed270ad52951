package db

import (
	"context"
	"fmt"
	"sync"
)

// On SQLite the process lock file makes this the only process on the database, so a hold is never
// lost to another process: Lost closes only on Release (or Close).

func (s *sqliteStore) HoldThread(ctx context.Context, threadKey string) (Hold, error) {
	unlock, err := s.LockThread(ctx, threadKey)
	if err != nil {
		return nil, err
	}
	return s.track(unlock)
}

// track makes a hold that Close ends, or fails (releasing the lock) if the store is closed already.
func (s *sqliteStore) track(unlock func()) (Hold, error) {
	h := newLocalHold(nil)
	h.unlock = func() {
		s.mu.Lock()
		delete(s.holds, h)
		s.mu.Unlock()
		unlock()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		unlock()
		return nil, errClosed
	}
	if s.holds == nil {
		s.holds = map[*localHold]struct{}{}
	}
	s.holds[h] = struct{}{}
	s.mu.Unlock()
	return h, nil
}

func (s *sqliteStore) HoldInstance(_ context.Context, instance string) (Hold, error) {
	if instance == "" {
		return nil, invalidf("empty instance id")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if s.instances == nil {
		s.instances = map[string]int{}
	}
	s.instances[instance]++
	s.mu.Unlock()
	return s.track(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.instances[instance]--; s.instances[instance] <= 0 {
			delete(s.instances, instance)
		}
	})
}

// InstanceAlive: only instances of this process can be alive, since no other process can open the
// database.
func (s *sqliteStore) InstanceAlive(_ context.Context, instance string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, fmt.Errorf("db: instance %s alive: %w", instance, errClosed)
	}
	return s.instances[instance] > 0, nil
}

type localHold struct {
	unlock func()
	lost   context.Context
	end    context.CancelFunc
	once   sync.Once
}

func newLocalHold(unlock func()) *localHold {
	ctx, cancel := context.WithCancel(context.Background())
	return &localHold{unlock: unlock, lost: ctx, end: cancel}
}

func (h *localHold) Lost() <-chan struct{}    { return h.lost.Done() }
func (h *localHold) Context() context.Context { return h.lost }

func (h *localHold) Release() {
	h.once.Do(func() {
		h.unlock()
		h.end()
	})
}
