package bot

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// internalDetail is what a chat user must never see: the provider's and the database's own words, a
// container id, a path on the host.
var internalDetail = []string{"docker", "Docker", "daemon", "db:", "d710c0ffee", "/var/run", "sandbox provider unavailable", "pq:", "sqlite"}

// errRawFailure is a realistic internal error: the text chat users used to see.
var errRawFailure = fmt.Errorf("inspect sandbox: docker inspect d710c0ffee: %w: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?: db: session slack:T:C:1",
	sandbox.ErrUnavailable)

func observed(level zapcore.Level) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(level)
	return zap.New(core), logs
}

// refOf returns the ref a message shows ("ref 7f3a2c"), or "".
func refOf(text string) string {
	m := regexp.MustCompile(`ref ([0-9a-f]{6})\b`).FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}

// loggedWithRef returns the log entries carrying ref.
func loggedWithRef(logs *observer.ObservedLogs, ref string) []observer.LoggedEntry {
	return logs.FilterField(zap.String("ref", ref)).All()
}

// TestEveryCodeSaysWhatToDo is the mapping's table: each code's text says what happened and what to
// do, shows a ref that finds the full error in the log, and leaks none of the error's own text.
func TestEveryCodeSaysWhatToDo(t *testing.T) {
	tests := []struct {
		code  agentpool.Code
		what  string // what happened
		do    string // what to do
		level zapcore.Level
		// status is the HTTP answer (the web API): the client's mistake, an outage, or ours.
		status int
	}{
		{agentpool.ECANCELLED, "stopped", "Send it again", zapcore.InfoLevel, http.StatusInternalServerError},
		{agentpool.ECAPACITY, "Too many messages", "Send it again once the queue has moved", zapcore.InfoLevel, http.StatusTooManyRequests},
		{agentpool.ECONFLICT, "changed this thread's sandbox at the same moment", "Try again", zapcore.WarnLevel, http.StatusConflict},
		{agentpool.EINTERNAL, "went wrong on my side", "tell an operator and quote the ref", zapcore.ErrorLevel, http.StatusInternalServerError},
		{agentpool.EINTERRUPTED, "interrupted by a restart", `send "retry"`, zapcore.InfoLevel, http.StatusInternalServerError},
		{agentpool.ELIMIT, "hit one of its limits", `"reset" for a fresh sandbox`, zapcore.InfoLevel, http.StatusInternalServerError},
		{agentpool.EINVALID, "could not use part of that request", "Check it and send it again", zapcore.InfoLevel, http.StatusBadRequest},
		{agentpool.ENOTFOUND, "no such thread", "Check the name", zapcore.InfoLevel, http.StatusNotFound},
		{agentpool.ERESET, "reset before this message ran", "Send it again", zapcore.InfoLevel, http.StatusInternalServerError},
		{agentpool.ERUNTIME, "agent", `"reset" starts the thread afresh`, zapcore.WarnLevel, http.StatusInternalServerError},
		{agentpool.ESANDBOX, "could not get this thread's sandbox running", "Try again in a minute", zapcore.WarnLevel, http.StatusInternalServerError},
		{agentpool.ESHUTDOWN, "restarting", "Send it again in a minute", zapcore.InfoLevel, http.StatusServiceUnavailable},
		{agentpool.ESTUCK, "no sign of progress", "smaller steps", zapcore.WarnLevel, http.StatusInternalServerError},
		{agentpool.ETIMEOUT, "time limit", "Split the task", zapcore.WarnLevel, http.StatusGatewayTimeout},
		{agentpool.ETOOLARGE, "over a size limit (attachments may be up to 256 MiB)", "Send a smaller one", zapcore.InfoLevel, http.StatusRequestEntityTooLarge},
		{agentpool.EUNAVAILABLE, "not answering", "Try again in a few minutes", zapcore.WarnLevel, http.StatusServiceUnavailable},
		{agentpool.EPROVIDERBUSY, "as many sandboxes as it allows", "send it again in a few minutes", zapcore.WarnLevel, http.StatusServiceUnavailable},
		{agentpool.EBUDGET, "model budget is used up", "start a new thread", zapcore.InfoLevel, http.StatusTooManyRequests},
	}
	covered := map[agentpool.Code]bool{}
	for _, tt := range tests {
		covered[tt.code] = true
		t.Run(string(tt.code), func(t *testing.T) {
			log, logs := observed(zapcore.DebugLevel)
			p := Explain(log, "turn failed", &agentpool.Error{Code: tt.code, Op: "inspect sandbox", Err: errRawFailure}, zap.String("thread", "slack:T:C:1"))
			shown := p.String()
			require.Equal(t, tt.code, p.Code)
			require.Contains(t, shown, tt.what)
			require.Contains(t, shown, tt.do)
			for _, leak := range internalDetail {
				require.NotContains(t, shown, leak)
			}
			require.Equal(t, p.Ref, refOf(shown), "the reply shows the ref")
			entries := loggedWithRef(logs, p.Ref)
			require.Len(t, entries, 1, "one log line per failure")
			require.Equal(t, tt.level, entries[0].Level)
			require.Equal(t, tt.status, p.HTTPStatus())
			fields := entries[0].ContextMap()
			require.Equal(t, string(tt.code), fields["code"])
			require.Equal(t, "slack:T:C:1", fields["thread"])
			require.Contains(t, fields["error"], "Cannot connect to the Docker daemon", "the log has the full error")
		})
	}
	for _, c := range agentpool.Codes() {
		_, ok := userText(c)
		require.True(t, ok, "code %s has no text", c)
		require.True(t, covered[c], "code %s has no row in this table", c)
	}
}

func TestExplainClassifiesUnwrappedErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want agentpool.Code
		ref  bool
	}{
		{"an unclassified error is internal", errors.New("db: pq: connection refused"), agentpool.EINTERNAL, true},
		{"a sentinel speaks for itself", fmt.Errorf("agentpool: submit: %w", agentpool.ErrQueueFull), agentpool.ECAPACITY, true},
		{"a provider outage", errRawFailure, agentpool.EUNAVAILABLE, true},
		{"a missing row", fmt.Errorf("web:nope: db: %w", db.ErrNotFound), agentpool.ENOTFOUND, true},
		{"an unknown code falls back to internal", &agentpool.Error{Code: "new", Err: errors.New("x")}, agentpool.EINTERNAL, true},
		{"our own usage line is shown as it is", badRequest("usage: %s <thread>", "pause"), agentpool.EINVALID, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, logs := observed(zapcore.InfoLevel)
			p := Explain(log, "failed", tt.err)
			require.Equal(t, tt.want, p.Code)
			for _, leak := range internalDetail {
				require.NotContains(t, p.String(), leak)
			}
			if !tt.ref {
				require.Equal(t, tt.err.Error(), p.String())
				require.Empty(t, p.Ref)
				require.Zero(t, logs.Len(), "nothing to look up, nothing logged above debug")
				return
			}
			require.Regexp(t, `^[0-9a-f]{6}$`, p.Ref)
			require.Len(t, loggedWithRef(logs, p.Ref), 1)
		})
	}
}

func TestRefsDiffer(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		seen[Explain(nil, "x", errors.New("x")).Ref] = true
	}
	require.Greater(t, len(seen), 95, "each failure has its own ref")
}

// TestThreadStatusHidesTheRecordedError: everyone in a thread reads "status", so it says a sandbox
// operation failed without the provider's words; admin inspect, for operators, shows them.
func TestThreadStatusHidesTheRecordedError(t *testing.T) {
	s := db.Session{ThreadKey: "slack:T:C:1", Status: db.SessionError, Provider: "docker", SandboxID: "d710c0ffee00aa",
		Generation: 2, Runtime: "shell", LastError: "resume sandbox: " + errRawFailure.Error()}
	tests := []struct {
		name      string
		text      string
		wantError bool
	}{
		{"thread status", formatSession(s, 0, false), false},
		{"admin inspect", FormatSession(s, 0), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantError {
				require.Contains(t, tt.text, "Last error: resume sandbox: inspect sandbox: docker inspect")
				return
			}
			require.Contains(t, tt.text, "The last sandbox operation failed; the next message tries again")
			require.NotContains(t, tt.text, "Cannot connect")
			require.NotContains(t, tt.text, "/var/run")
		})
	}
}
