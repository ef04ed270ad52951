package bot

import (
	"context"
	"errors"
	"net"
)

// Transient marks err, a chat API failure, as one that may pass when tried later (a rate limit, a
// 5xx): an adapter wraps its SDK's error with it where RetryLater would not see it, since the core
// knows no SDK's types.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return transientError{err}
}

type transientError struct{ err error }

func (e transientError) Error() string   { return e.err.Error() }
func (e transientError) Unwrap() error   { return e.err }
func (e transientError) Retryable() bool { return true }

// retryable is an error that says whether it is worth retrying.
type retryable interface {
	error
	Retryable() bool
}

// RetryLater reports whether a chat API call that failed with err may pass when tried later: a rate
// limit, a timeout or a lost connection, a server error (an error that says so with Retryable, as
// slack-go's do, or Transient). A refusal (no such channel, archived, not allowed, too long) fails
// the same way every time.
func RetryLater(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := errors.AsType[*RateLimitedError](err); ok {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	if r, ok := errors.AsType[retryable](err); ok {
		return r.Retryable()
	}
	return false
}
