// Package logging builds Threadbox's zap logger: console output for people, JSON for production, one
// named child per component, and every configured secret redacted before it reaches a sink: URL
// passwords by their place in the URL, other secrets by value.
package logging

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Redacted replaces a secret wherever it appears.
const Redacted = "[REDACTED]"

// minSecretLen keeps short values (say "1", "true" or "admin") from being redacted by value: redacting
// them would shred ordinary log lines and protect nothing. Real tokens are far longer; a short password
// in a URL is still redacted by its place (RedactURLs).
const minSecretLen = 8

// Options selects format and level.
type Options struct {
	Level  string // debug, info, warn, error
	Format string // console, json
	// Secrets are values never to be written, whatever field or message carries them.
	Secrets []string
	// Public are values printed on purpose (the deployment, the database user and name). A secret
	// equal to one of them is not redacted by value: with the user, database and password all
	// "threadbox", redacting "threadbox" would blank the deployment and every thread key while
	// hiding nothing a reader of those lines could not guess. Its URL is still redacted by place.
	Public []string
}

// New builds a logger writing to w.
func New(w io.Writer, o Options) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(o.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	var enc zapcore.Encoder
	switch o.Format {
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case "console", "":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("log.format %q: must be console or json", o.Format)
	}
	// Locked: many goroutines log at once, and w (a file, a test buffer) need not be safe for that.
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(NewRedactingCore(core, SecretsToRedact(o.Secrets, o.Public)), zap.AddCaller()), nil
}

// SecretsToRedact keeps the secrets specific enough to redact by value: long enough, and not one of
// the public values.
func SecretsToRedact(secrets, public []string) []string {
	var keep []string
	for _, s := range secrets {
		if len(s) < minSecretLen || slices.ContainsFunc(public, func(p string) bool { return strings.EqualFold(p, s) }) {
			continue
		}
		keep = append(keep, s)
	}
	return keep
}

// Redactor returns the redaction the log applies, for text that leaves by other ways (admin
// replies): URL passwords by place, then the given secrets by value (filter them with
// SecretsToRedact first).
func Redactor(secrets []string) func(string) string {
	return NewRedactingCore(zapcore.NewNopCore(), secrets).(redactingCore).redact
}

// NewRedactingCore wraps core so that URL passwords and the given secrets are replaced in messages
// and string fields, including fields added with With. Secrets are taken as given: filter them with
// SecretsToRedact first.
func NewRedactingCore(core zapcore.Core, secrets []string) zapcore.Core {
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		if s != "" {
			pairs = append(pairs, s, Redacted)
		}
	}
	return redactingCore{Core: core, r: strings.NewReplacer(pairs...)}
}

type redactingCore struct {
	zapcore.Core
	r *strings.Replacer
}

// redact takes URL passwords out first (by place), then secrets by value.
func (c redactingCore) redact(s string) string { return c.r.Replace(RedactURLs(s)) }

func (c redactingCore) With(fields []zapcore.Field) zapcore.Core {
	return redactingCore{Core: c.Core.With(c.fields(fields)), r: c.r}
}

func (c redactingCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c redactingCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	e.Message = c.redact(e.Message)
	return c.Core.Write(e, c.fields(fields))
}

// fields redacts string-valued fields and errors. Other field types (numbers, durations) cannot
// carry a token.
func (c redactingCore) fields(in []zapcore.Field) []zapcore.Field {
	out := make([]zapcore.Field, len(in))
	for i, f := range in {
		switch f.Type {
		case zapcore.StringType:
			f.String = c.redact(f.String)
		case zapcore.ErrorType:
			if err, ok := f.Interface.(error); ok && err != nil {
				f = zap.String(f.Key, c.redact(err.Error()))
			}
		case zapcore.StringerType:
			if s, ok := f.Interface.(fmt.Stringer); ok && s != nil {
				f = zap.String(f.Key, c.redact(s.String()))
			}
		case zapcore.ReflectType:
			f = zap.String(f.Key, c.redact(fmt.Sprintf("%+v", f.Interface)))
		case zapcore.ByteStringType:
			if b, ok := f.Interface.([]byte); ok {
				f = zap.String(f.Key, c.redact(string(b)))
			}
		case zapcore.ArrayMarshalerType, zapcore.ObjectMarshalerType, zapcore.InlineMarshalerType:
			// They encode themselves, straight to the sink: encode them here instead, redact every
			// string in what they wrote (zap.Errors' texts, a report's failures), and log that.
			f = c.marshaled(f)
		}
		out[i] = f
	}
	return out
}

// marshaled is f, an array or object field, encoded and redacted. A marshaler's own error is logged
// as zap logs it ("<key>Error").
func (c redactingCore) marshaled(f zapcore.Field) zapcore.Field {
	enc := zapcore.NewMapObjectEncoder()
	f.AddTo(enc)
	if f.Type == zapcore.InlineMarshalerType {
		return zap.Inline(redactedObject(c.redactValue(enc.Fields).(map[string]any)))
	}
	for k, v := range enc.Fields {
		if k != f.Key {
			return zap.String(k, c.redact(fmt.Sprint(v))) // the marshaler failed
		}
	}
	v := c.redactValue(enc.Fields[f.Key])
	if m, ok := v.(map[string]any); ok {
		return zap.Object(f.Key, redactedObject(m))
	}
	return zap.Any(f.Key, v)
}

// redactValue redacts the strings in a value a MapObjectEncoder built.
func (c redactingCore) redactValue(v any) any {
	switch v := v.(type) {
	case string:
		return c.redact(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = c.redactValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = c.redactValue(e)
		}
		return out
	case []byte:
		return c.redact(string(v))
	case fmt.Stringer, error:
		return c.redact(fmt.Sprint(v))
	}
	return v
}

// redactedObject logs a redacted object with its keys in order.
type redactedObject map[string]any

func (o redactedObject) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := enc.AddReflected(k, o[k]); err != nil {
			return err
		}
	}
	return nil
}
