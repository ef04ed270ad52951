//go:build !unix

package db

// fileLock is a no-op where flock does not exist: threadbox targets Linux and macOS, and on other
// systems nothing stops a second process from opening the SQLite database.
type fileLock struct{}

func lockFile(string) (*fileLock, error) { return &fileLock{}, nil }

func (*fileLock) unlock() {}
