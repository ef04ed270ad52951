package db

import (
	"context"
	"sync"
)

// keyedMutex is a set of mutexes, one per key, that exist only while someone holds or waits for them,
// so that a process that has seen a million threads does not keep a million mutexes. Waiting honours
// the context.
type keyedMutex struct {
	mu sync.Mutex // protects the following
	m  map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{} // holds one token while the key is locked
	refs int           // holders and waiters; guarded by keyedMutex.mu
}

func newKeyedMutex() *keyedMutex { return &keyedMutex{m: make(map[string]*keyLock)} }

// lock blocks until it holds key or ctx ends. The returned unlock is idempotent.
func (k *keyedMutex) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	l := k.m[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()

	select {
	case l.ch <- struct{}{}:
	case <-ctx.Done():
		k.release(key, l)
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-l.ch
			k.release(key, l)
		})
	}, nil
}

func (k *keyedMutex) release(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(k.m, key)
	}
}

// len reports how many keys are live; tests use it to check that nothing leaks.
func (k *keyedMutex) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}
