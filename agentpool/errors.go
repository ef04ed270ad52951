package agentpool

import (
	"context"
	"errors"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// Code says what kind of failure an error is, after benbjohnson/wtf's error codes: the pool decides
// it where the error is made (it knows whether the sandbox or the agent failed), and the bot maps
// each code to a message for the user, in one table. The codes are stable: they are logged, and the
// bot's table and tests are keyed by them.
type Code string

// The codes. A new one needs a row in the bot's table (its test fails otherwise).
const (
	// ECANCELLED: stopped on request (the "stop" command).
	ECANCELLED Code = "cancelled"
	// ECAPACITY: too much work already waits (the thread's queue is full).
	ECAPACITY Code = "capacity"
	// ECONFLICT: another action changed the same session at the same moment.
	ECONFLICT Code = "conflict"
	// EINTERNAL: a failure with no better class; a bug until shown otherwise.
	EINTERNAL Code = "internal"
	// EINTERRUPTED: the process running the turn died; the turn is not run again on its own.
	EINTERRUPTED Code = "interrupted"
	// ELIMIT: the turn hit a sandbox limit (memory, disk); the error is a *LimitError with the numbers.
	ELIMIT Code = "limit"
	// EINVALID: the request itself is wrong (an attachment that cannot be read, a bad argument).
	EINVALID Code = "invalid"
	// ENOTFOUND: no such thread, session or turn.
	ENOTFOUND Code = "not_found"
	// ERESET: the thread was reset before the turn ran.
	ERESET Code = "reset"
	// ERUNTIME: the agent runtime inside the sandbox failed (would not start, crashed, refused).
	ERUNTIME Code = "runtime"
	// ESANDBOX: the thread's sandbox could not be created, resumed or used.
	ESANDBOX Code = "sandbox"
	// ESHUTDOWN: this process is shutting down and takes no more work.
	ESHUTDOWN Code = "shutdown"
	// ESTUCK: the watchdog stopped a turn that showed no sign of life.
	ESTUCK Code = "stuck"
	// ETIMEOUT: the turn ran past its time limit.
	ETIMEOUT Code = "timeout"
	// ETOOLARGE: an input was over a size limit.
	ETOOLARGE Code = "too_large"
	// EUNAVAILABLE: a service the turn needs (the sandbox provider, the database) is down.
	EUNAVAILABLE Code = "unavailable"
	// EPROVIDERBUSY: the sandbox provider runs as many sandboxes as it allows (Deno's concurrency
	// limit); it outlasted the wait.
	EPROVIDERBUSY Code = "provider_busy"
	// EBUDGET: the model gateway refused the turn's model calls, a budget being used up; the error is
	// a *runtime.BudgetError with the numbers (a turn refused this way ends with Outcome.Refusal).
	EBUDGET Code = "budget"
)

// Codes lists every code, for tables that must cover them all.
func Codes() []Code {
	return []Code{ECANCELLED, ECAPACITY, ECONFLICT, EINTERNAL, EINTERRUPTED, ELIMIT, EINVALID, ENOTFOUND, ERESET,
		ERUNTIME, ESANDBOX, ESHUTDOWN, ESTUCK, ETIMEOUT, ETOOLARGE, EUNAVAILABLE, EPROVIDERBUSY, EBUDGET}
}

// Error is a classified failure: Op is what was being done ("prepare sandbox"), for the log; Err is
// the cause, kept whole for the log and for errors.Is. Its text is for operators, never for chat
// users: the bot shows a message chosen by Code.
type Error struct {
	Code Code
	Op   string
	Err  error
}

func (e *Error) Error() string {
	switch {
	case e.Err == nil:
		return e.Op + ": " + string(e.Code)
	case e.Op == "":
		return e.Err.Error()
	}
	return e.Op + ": " + e.Err.Error()
}

// Unwrap keeps the cause matchable with errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// classify wraps err, the failure of op, as an *Error. A cause that already says what happened (an
// outage, a cancellation, an earlier classification) keeps its code; otherwise the failure takes
// fallback, the code of where it happened. nil stays nil.
func classify(fallback Code, op string, err error) error {
	if err == nil {
		return nil
	}
	code, ok := causeCode(err)
	if !ok {
		code = fallback
	}
	return &Error{Code: code, Op: op, Err: err}
}

// ErrorCode is err's code: the one it was classified with, else the one its sentinel implies, else
// EINTERNAL. It returns "" for nil. It uses errors.Is and errors.As only, never the text.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	if code, ok := causeCode(err); ok {
		return code
	}
	// What follows depends on where it happened (a context deadline may be the turn's limit or a
	// database call's), so it only answers for errors nothing classified.
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ETIMEOUT
	case errors.Is(err, context.Canceled):
		return ECANCELLED
	case errors.Is(err, db.ErrNotFound):
		return ENOTFOUND
	case errors.Is(err, db.ErrConflict):
		return ECONFLICT
	case errors.Is(err, db.ErrInvalid):
		return EINVALID
	}
	return EINTERNAL
}

// causeCode is the code of a cause that says what happened wherever it shows up.
func causeCode(err error) (Code, bool) {
	var (
		e  *Error
		le *LimitError
	)
	switch {
	case errors.As(err, &e):
		return e.Code, true
	case errors.As(err, &le):
		return ELIMIT, true
	case errors.Is(err, ErrInterrupted):
		return EINTERRUPTED, true
	case errors.Is(err, ErrStuck):
		return ESTUCK, true
	case errors.Is(err, ErrReset):
		return ERESET, true
	case errors.Is(err, ErrClosed):
		return ESHUTDOWN, true
	case errors.Is(err, ErrCancelled):
		return ECANCELLED, true
	case errors.Is(err, ErrQueueFull):
		return ECAPACITY, true
	case errors.Is(err, sandbox.ErrProviderBusy):
		return EPROVIDERBUSY, true
	case errors.Is(err, ErrLockLost), errors.Is(err, sandbox.ErrUnavailable), errors.Is(err, db.ErrLocked):
		return EUNAVAILABLE, true
	case errors.Is(err, sandbox.ErrFileTooLarge):
		return ETOOLARGE, true
	case errors.Is(err, runtime.ErrBudget):
		return EBUDGET, true
	}
	return "", false
}
