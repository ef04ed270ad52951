package logging

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestSecretsAreRedactedEverywhere(t *testing.T) {
	const tok = "xoxb-1234-abcdef"
	for _, format := range []string{"json", "console"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, Options{Level: "debug", Format: format, Secrets: []string{tok, "1"}})
			require.NoError(t, err)
			log = log.Named("slack").With(zap.String("ctx", "bearer "+tok))
			log.Info("posting with "+tok,
				zap.String("token", tok),
				zap.Error(errors.New("auth failed for "+tok)),
				zap.Stringer("url", stringer("https://x/?t="+tok)),
				zap.Any("req", map[string]string{"auth": tok}),
				zap.Int("n", 1),
				// Arrays and objects are encoded by themselves, past the string fields: a pass's
				// errors (zap.Errors) or report (zap.Object) carry provider and git error texts.
				zap.Errors("errors", []error{errors.New("clone https://github.com/x with " + tok)}),
				zap.Strings("list", []string{tok}),
				zap.Object("report", report{tok}),
				zap.ByteString("raw", []byte(tok)),
			)
			out := buf.String()
			require.NotContains(t, out, tok)
			require.Contains(t, out, Redacted)
			require.Contains(t, out, "slack", "named loggers keep their name")
			require.Contains(t, out, "1", "short values are not treated as secrets")
		})
	}
}

func TestBadOptions(t *testing.T) {
	_, err := New(&bytes.Buffer{}, Options{Level: "loud", Format: "json"})
	require.ErrorContains(t, err, "log.level")
	_, err = New(&bytes.Buffer{}, Options{Level: "info", Format: "xml"})
	require.ErrorContains(t, err, "log.format")
}

// report is an ObjectMarshaler with a nested array, as agentpool's pass reports are.
type report struct{ detail string }

func (r report) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("detail", r.detail)
	return enc.AddArray("failures", zapcore.ArrayMarshalerFunc(func(a zapcore.ArrayEncoder) error {
		a.AppendString("failed: " + r.detail)
		return nil
	}))
}

type stringer string

func (s stringer) String() string { return string(s) }

func TestRedactorIsTheLogsRedaction(t *testing.T) {
	r := Redactor(SecretsToRedact([]string{"dtn_0123456789abcdef"}, nil))
	require.Equal(t, "GET https://ops:"+URLPassword+"@host/x: bad key "+Redacted,
		r("GET https://ops:hunter2@host/x: bad key dtn_0123456789abcdef"))
}
