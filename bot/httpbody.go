package bot

import (
	"bytes"
	"io"
	"net/http"
)

// MaxPlatformBody bounds what a chat adapter reads of a platform's request (a Slack event or slash
// command, a Discord interaction) before verifying its signature: unverified bytes are anyone's.
// Real ones are a few kilobytes; Discord caps an option at 6,000 characters.
const MaxPlatformBody = 1 << 20

// ReadPlatformBody reads a platform's POST body, at most max bytes. When the body is not to be used
// it answers the request itself (405 for another method, 413 past max, 400 when the read fails) and
// reports false. A body past max is refused as too large, never cut and then judged by its
// signature: a cut body fails verification and would be reported as a forgery.
func ReadPlatformBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return nil, false
	}
	if r.ContentLength > max {
		// Declared too large: refused before a byte of it is read.
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return nil, false
	}
	// The buffer is sized from the declared length, so that reading a real body (a few KB) does not
	// grow it several times over (every acknowledged event's garbage counts at thousands a second);
	// at most presize up front, since the length is the sender's word. The read stays capped at max
	// whatever was declared.
	size := int64(0)
	if r.ContentLength > 0 {
		size = min(r.ContentLength, presize)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, max+1)); err != nil {
		http.Error(w, "reading body", http.StatusBadRequest)
		return nil, false
	}
	if int64(buf.Len()) > max {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return nil, false
	}
	return buf.Bytes(), true
}

// presize bounds the buffer ReadPlatformBody allocates before reading, from a declared length.
const presize = 64 << 10
