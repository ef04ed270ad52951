package sandbox

import "errors"

var (
	// ErrNotFound: the sandbox does not exist (never created, destroyed, or removed out of band).
	// The resolver answers it by recreating. A missing path inside a live sandbox is not this: file
	// operations report it with fs.ErrNotExist, so that it never triggers a recreate.
	ErrNotFound = errors.New("sandbox not found")
	// ErrNotRunning: the sandbox exists but is stopped or archived, so it cannot exec or dial.
	ErrNotRunning = errors.New("sandbox not running")
	// ErrUnavailable: the provider itself cannot be reached (the Docker daemon restarting, a cloud API
	// down). The sandbox may be fine; waiting, not recreating, is the answer.
	ErrUnavailable = errors.New("sandbox provider unavailable")
	// ErrUnsupported: the provider has no such capability.
	ErrUnsupported = errors.New("not supported by this sandbox provider")
	// ErrInvalidSpec: the request itself is wrong; retrying cannot help.
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrNoEffect marks a failure after which the provider surely did nothing (the request never
	// reached it, or it refused before acting). Only such Create failures may be retried blindly.
	ErrNoEffect = errors.New("provider did nothing")
	// ErrFileTooLarge: a read exceeded the caller's size bound.
	ErrFileTooLarge = errors.New("file larger than allowed")
	// ErrNotRegular: a file operation met a symlink, directory or device where it needs a regular
	// file (or a directory, for ListFiles), and refused rather than follow it.
	ErrNotRegular = errors.New("not a regular file")
)
