package sandbox

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound: the sandbox does not exist (never created, destroyed, or removed out of band).
	// The resolver answers it by recreating. A missing path inside a live sandbox is not this: file
	// operations report it with fs.ErrNotExist, so that it never triggers a recreate.
	ErrNotFound = errors.New("sandbox not found")
	// ErrNotRunning: the sandbox exists but is stopped or archived, so it cannot exec or dial.
	ErrNotRunning = errors.New("sandbox not running")
	// ErrUnsupported: the provider has no such capability.
	ErrUnsupported = errors.New("not supported by this sandbox provider")
	// ErrInvalidSpec: the request itself is wrong; retrying cannot help.
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrNoEffect marks a failure after which the provider surely did nothing (the request never
	// reached it, or it refused before acting). Only such Create failures may be retried blindly.
	ErrNoEffect = errors.New("provider did nothing")
	// ErrTooLarge: something read from a sandbox, or from a runtime inside one, exceeded its cap (a
	// file, a listing, a stream line or event, a JSON answer). The read is abandoned rather than
	// buffered: what the sandbox sends is controlled by the agent, so no size can be trusted.
	ErrTooLarge = errors.New("larger than allowed")
	// ErrFileTooLarge: a file read exceeded the caller's size bound. It wraps ErrTooLarge.
	ErrFileTooLarge = fmt.Errorf("file %w", ErrTooLarge)
	// ErrUnavailable: the provider itself cannot be reached or is not serving (the Docker daemon is
	// restarting, a cloud API is down or overloaded). Nothing is known about the sandbox: it is neither
	// found nor missing. Callers wait and retry (lifecycle.provider_wait) rather than recreate or fail.
	// Providers wrap it around connection failures and 502/503/504-like answers.
	ErrUnavailable = errors.New("sandbox service unavailable")
	// ErrProviderBusy: the provider refuses to run one more sandbox now (an account's limit on
	// concurrently running sandboxes, as Deno has). It wraps ErrUnavailable, so callers wait it out
	// like an outage (an idle sandbox paused elsewhere frees a place), and tell the user plainly when
	// it lasts.
	ErrProviderBusy = fmt.Errorf("the sandbox provider runs no more sandboxes at once: %w", ErrUnavailable)
	// ErrNotRegular: a file operation met a symlink, directory or device where it needs a regular
	// file (or a directory, for ListFiles), and refused rather than follow it.
	ErrNotRegular = errors.New("not a regular file")
)
