package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/threadbox/threadbox/bot"
)

// errorJSON is every error body: {"error": "..."}.
type errorJSON struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorJSON{Error: msg})
}

// maxQuoted bounds, in runes, how much of a client's own text a refusal quotes.
const maxQuoted = 80

// quoted is the client's text s as a refusal names it: at most maxQuoted runes, in Go quotes with
// control and format characters and invalid UTF-8 escaped, so a long or hostile value neither swells
// the reply nor acts on the terminal of a CLI that prints it.
func quoted(s string) string {
	if utf8.RuneCountInString(s) > maxQuoted {
		s = string([]rune(s)[:maxQuoted-1]) + "…"
	}
	return strconv.Quote(s)
}

// httpError is an error with the status to answer it with.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// writeErr answers err: an *httpError with its own status and words; anything else with the bot's
// text for it and its ref (bot.Explain logs the full error under the ref), never the error's text.
func (s *Server) writeErr(w http.ResponseWriter, err error) {
	var he *httpError
	if errors.As(err, &he) {
		writeError(w, he.status, he.msg)
		return
	}
	p := bot.Explain(s.log, "API request failed", err)
	writeError(w, p.HTTPStatus(), p.String())
}

// decodeJSON reads one JSON object of at most limit bytes into v. An empty body leaves v as it is
// when emptyOK. The errors say what was wrong, for a 400 or 413 the client can act on.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, emptyOK bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return errorf(http.StatusUnsupportedMediaType, "send Content-Type: application/json")
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	var raw json.RawMessage
	err := dec.Decode(&raw)
	if errors.Is(err, io.EOF) && emptyOK {
		return nil
	}
	if err == nil {
		// Anything after the object (a second value, a stray bracket) is malformed too.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil {
		err = exactKeys(raw, v)
	}
	if err == nil {
		strict := json.NewDecoder(bytes.NewReader(raw))
		strict.DisallowUnknownFields()
		err = strict.Decode(v)
	}
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &mbe):
		return errorf(http.StatusRequestEntityTooLarge, "request body too large: the limit is %s", bot.HumanSize(mbe.Limit))
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, "malformed JSON: empty body")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, "malformed JSON: unexpected end of input")
	}
	return errorf(http.StatusBadRequest, "malformed JSON: %s", err.Error())
}

// exactKeys checks that raw is one JSON object whose keys are v's fields' json names exactly, each
// once. encoding/json alone matches keys in any case and lets a later duplicate win, so {"TEXT": ...}
// or {"text": "a", "Text": "b"} would be taken, and a proxy or log reading exact keys would see
// another message than the bot runs.
func exactKeys(raw json.RawMessage, v any) error {
	known := jsonNames(reflect.TypeOf(v))
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("want a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		switch {
		case !known[key]:
			return fmt.Errorf("unknown field %q", key)
		case seen[key]:
			return fmt.Errorf("duplicate field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// jsonNames are the keys a struct (or pointer to one) takes: its exported fields' json names.
func jsonNames(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	names := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return names
	}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names[name] = true
	}
	return names
}

// clip cuts text for display at a rune boundary; cut is how many bytes were left out.
func clip(text string, max int) (out string, cut int) {
	if len(text) <= max {
		return text, 0
	}
	n := max
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	return text[:n], len(text) - n
}

// timePtr renders a zero time (a NULL column) as an absent field.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
