package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
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
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) && emptyOK {
		return nil
	}
	if err == nil {
		// Anything after the object (a second value, a stray bracket) is malformed too.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("unexpected data after the JSON object")
		}
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
