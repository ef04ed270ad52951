//go:build unix

package db

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// fileLock is an exclusive flock on a file next to the database. flock locks belong to the open
// file, so a second open of the same path conflicts even inside one process, and the kernel drops
// the lock when the process dies: a crash leaves no stale lock behind. The file is never deleted
// (deleting it would let two processes lock two different files of the same name).
type fileLock struct{ f *os.File }

func lockFile(path string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("flock: %w", err)
	}
	// The pid is for operators wondering who holds the database; nothing reads it.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &fileLock{f: f}, nil
}

func (l *fileLock) unlock() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
}
