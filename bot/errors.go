package bot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime"
)

// The error model at the user edge (DESIGN §10, after benbjohnson/wtf): the pool classifies a failure
// with an agentpool.Code where it happens; here, and only here, a code becomes text for a chat user.
// Users never see an error's own text (Docker's, the database's, a path): they see what happened, what
// to do, and a short reference; the log has the full error under the same reference (field "ref").

// Problem is a failure as a user is told about it.
type Problem struct {
	Code agentpool.Code
	// Text says what happened and what to do, in full sentences.
	Text string
	// Ref finds the full error in the log (field "ref"); empty when there is nothing to look up (the
	// user's own mistake, explained in full by Text).
	Ref string
}

// String is the message to show: the text, and the reference if any.
func (p Problem) String() string {
	if p.Ref == "" {
		return p.Text
	}
	return p.Text + " (ref " + p.Ref + ")"
}

// HTTPStatus is the status that fits the problem, for adapters that answer over HTTP (the web chat's
// API), after wtf's http.Error: a client can tell its own mistake from an outage from a bug.
func (p Problem) HTTPStatus() int {
	switch p.Code {
	case agentpool.EINVALID:
		return http.StatusBadRequest
	case agentpool.ENOTFOUND:
		return http.StatusNotFound
	case agentpool.ECONFLICT:
		return http.StatusConflict
	case agentpool.ETOOLARGE:
		return http.StatusRequestEntityTooLarge
	case agentpool.ECAPACITY, agentpool.EBUDGET:
		return http.StatusTooManyRequests
	case agentpool.EUNAVAILABLE, agentpool.ESHUTDOWN, agentpool.EPROVIDERBUSY:
		return http.StatusServiceUnavailable
	case agentpool.ETIMEOUT:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// Explain logs err in full under a new reference, with msg and fields, and returns what to tell the
// user. It is the one place an error becomes user text: adapters and commands call it rather than
// show err.Error().
func Explain(log *zap.Logger, msg string, err error, fields ...zap.Field) Problem {
	if log == nil {
		log = zap.NewNop()
	}
	var (
		re *requestError
		le *agentpool.LimitError
	)
	if errors.As(err, &re) {
		// Our own words about the user's request: nothing to look up.
		log.Debug(msg, append(fields, zap.Error(err))...)
		return Problem{Code: agentpool.EINVALID, Text: re.msg}
	}
	if errors.As(err, &le) {
		// The sandbox's limit, with its numbers: the text says it all, nothing to look up.
		log.Info(msg, append(fields, zap.String("code", string(agentpool.ELIMIT)), zap.Error(err))...)
		return Problem{Code: agentpool.ELIMIT, Text: limitText(le)}
	}
	var be *runtime.BudgetError
	if errors.As(err, &be) {
		// The gateway's refusal, with its numbers: the user's (or the deployment's) budget, not a
		// fault; the text says it all, nothing to look up.
		log.Info(msg, append(fields, zap.String("code", string(agentpool.EBUDGET)), zap.Error(err))...)
		return Problem{Code: agentpool.EBUDGET, Text: budgetText(be)}
	}
	var ne *runtime.NoPublicURLError
	if errors.As(err, &ne) {
		// The operator's setting, not the user's doing: the text says whom to ask and what to set;
		// the ref finds the thread for the operator.
		p := Problem{Code: agentpool.ERUNTIME, Text: noPublicURLText(ne), Ref: newRef()}
		log.Warn(msg, append(fields, zap.String("ref", p.Ref), zap.String("code", string(p.Code)), zap.Error(err))...)
		return p
	}
	var we *agentpool.WorkspaceError
	if errors.As(err, &we) {
		// The workspace's own words (a repository off the allowlist, a failing clone); the cause,
		// which may name internal detail, goes to the log under the ref.
		p := Problem{Code: agentpool.EINVALID, Text: we.Text, Ref: newRef()}
		log.Info(msg, append(fields, zap.String("ref", p.Ref), zap.String("code", string(p.Code)), zap.Error(err))...)
		return p
	}
	code := agentpool.ErrorCode(err)
	text, ok := userText(code)
	if !ok {
		code = agentpool.EINTERNAL
		text, _ = userText(code)
	}
	p := Problem{Code: code, Text: text, Ref: newRef()}
	if ce := log.Check(logLevel(code), msg); ce != nil {
		ce.Write(append(fields, zap.String("ref", p.Ref), zap.String("code", string(code)), zap.Error(err))...)
	}
	return p
}

// userText is the table: for each code, what happened and what to do. ok is false for a code it does
// not know (a test requires every agentpool code to have a row).
func userText(code agentpool.Code) (text string, ok bool) {
	switch code {
	case agentpool.ECANCELLED:
		return "It was stopped before it finished. Send it again if you still want it done.", true
	case agentpool.ECAPACITY:
		return "Too many messages are already waiting here, so I did not take this one. Send it again once the queue has moved (\"status\" shows it).", true
	case agentpool.ECONFLICT:
		return "Something else changed this thread's sandbox at the same moment. Try again.", true
	case agentpool.EINTERNAL:
		return "Something went wrong on my side. Try again; if it keeps happening, tell an operator and quote the ref.", true
	case agentpool.EINTERRUPTED:
		return "This message was interrupted by a restart, or by a lost connection to its agent, before it finished. I did not run it again on my own, since it may have done part of its work: send \"retry\" to run it again.", true
	case agentpool.ELIMIT:
		return "This thread's sandbox hit one of its limits (memory or disk). Use less at once, delete files you no longer need, or \"reset\" for a fresh sandbox.", true
	case agentpool.EINVALID:
		return "I could not use part of that request (an argument, or an attachment I could not read). Check it and send it again.", true
	case agentpool.ENOTFOUND:
		return "There is no such thread or session. Check the name and try again.", true
	case agentpool.ERESET:
		return "The thread was reset before this message ran. Send it again if you still want it done.", true
	case agentpool.ERUNTIME:
		return "The agent in this thread's sandbox failed to start or stopped answering. Try again; if it keeps failing, \"reset\" starts the thread afresh (its files are lost).", true
	case agentpool.ESANDBOX:
		return "I could not get this thread's sandbox running. Try again in a minute; if it keeps failing, \"reset\" gives the thread a new sandbox (its files are lost), or tell an operator and quote the ref.", true
	case agentpool.ESHUTDOWN:
		return "The bot is restarting and did not run this. Send it again in a minute.", true
	case agentpool.ESTUCK:
		return "The agent showed no sign of progress for a long time, so I stopped it. Try again, perhaps in smaller steps.", true
	case agentpool.ETIMEOUT:
		return "It took longer than the time limit and was stopped. Split the task into smaller steps and try again.", true
	case agentpool.ETOOLARGE:
		return fmt.Sprintf("An attachment or file was over a size limit (attachments may be up to %s). Send a smaller one, or split it.",
			HumanSize(agentpool.MaxInboundFile)), true
	case agentpool.EPROVIDERBUSY:
		return "The sandbox service is running as many sandboxes as it allows right now. This thread gets one as soon as another goes idle: send it again in a few minutes.", true
	case agentpool.EBUDGET:
		return "The model budget is used up, so I did not run this. Budgets per user and for the bot renew at midnight UTC; a thread's budget does not, so start a new thread to go on.", true
	case agentpool.EUNAVAILABLE:
		return "A service I depend on (the sandbox service or the database) is not answering right now. Try again in a few minutes; if it lasts, tell an operator and quote the ref.", true
	}
	return "", false
}

// logLevel is how loud a failure of code is in the log: what the user did or asked for is routine,
// an outage or a failed sandbox is worth a look, and an unclassified failure is a bug until shown
// otherwise.
func logLevel(code agentpool.Code) zapcore.Level {
	switch code {
	case agentpool.ECANCELLED, agentpool.ECAPACITY, agentpool.EBUDGET, agentpool.EINTERRUPTED, agentpool.ELIMIT, agentpool.EINVALID,
		agentpool.ENOTFOUND, agentpool.ERESET, agentpool.ESHUTDOWN, agentpool.ETOOLARGE:
		return zapcore.InfoLevel
	case agentpool.EINTERNAL:
		return zapcore.ErrorLevel
	}
	return zapcore.WarnLevel
}

// newRef is a short reference for one failure: six hex digits, enough to find it in the log next to
// the time and the thread.
func newRef() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestError is our own explanation of what is wrong with a user's request (a usage line); it is
// shown as it is.
type requestError struct {
	msg string
	// err is the sentinel it stands for, if any (ErrUnknownStatus), for errors.Is.
	err error
}

func (e *requestError) Error() string { return e.msg }
func (e *requestError) Unwrap() error { return e.err }

// badRequest returns a requestError with a formatted message.
func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}
