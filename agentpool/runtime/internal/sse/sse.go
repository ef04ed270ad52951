// Package sse reads the server-sent event streams of the agent servers inside a sandbox (opencode's
// /event, sandbox-agent's ACP stream). What such a stream carries is controlled by the agent, so
// every line and every event is bounded: past the bound the read fails with sandbox.ErrTooLarge
// instead of buffering without end.
package sse

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	"github.com/threadbox/threadbox/sandbox"
)

// MaxEventBytes bounds one event's data (its data lines joined), and so any one line of the stream.
// opencode sends a text part whole on each of its updates, so a 10 MB answer makes 10 MB events;
// this leaves room for that, JSON escaping included.
const MaxEventBytes = 32 << 20

// Event is one event of the stream: its id field (the last one seen, as the spec says) and its data.
type Event struct {
	ID   string
	Data []byte
}

// Reader reads events. It is not safe for concurrent use.
type Reader struct {
	br  *bufio.Reader
	max int
	id  string
	// afterCR: the last line ended at a CR, so an LF next is part of that line end.
	afterCR bool
}

// NewReader reads events from r, each of at most max bytes of data (max <= 0: MaxEventBytes).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = MaxEventBytes
	}
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next event that has data; comments, other fields and events without data are
// skipped. An event cut off by the end of the stream is dropped, as the spec says, and io.EOF
// returned. A line or an event over the bound fails with an error wrapping sandbox.ErrTooLarge;
// the stream cannot be read further.
func (r *Reader) Next() (Event, error) {
	var data []byte
	hasData := false
	for {
		line, err := r.line()
		if err != nil {
			return Event{}, err
		}
		if len(line) == 0 {
			if hasData {
				return Event{ID: r.id, Data: data}, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment (keep-alive)
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			r.id = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			if len(data)+len(value) > r.max {
				return Event{}, fmt.Errorf("sse: event data over %d bytes: %w", r.max, sandbox.ErrTooLarge)
			}
			data = append(data, value...)
			hasData = true
		}
	}
}

// lineSlack is what a line may hold besides an event's worth of data: a field name and the line end.
const lineSlack = 64

// line returns the next line without its end, at most max+lineSlack bytes. A line ends at CRLF, LF
// or CR, as the spec says. After a CR the LF that may follow is skipped when the next line is read,
// not now: peeking for it would hold an event back until the server sent another byte.
func (r *Reader) line() ([]byte, error) {
	if r.afterCR {
		r.afterCR = false
		if b, err := r.br.Peek(1); err == nil && b[0] == '\n' {
			_, _ = r.br.Discard(1)
		}
	}
	var line []byte
	for {
		n := r.br.Buffered()
		if n == 0 {
			n = 1 // blocks for the next byte (or the stream's end)
		}
		buf, err := r.br.Peek(n)
		if len(buf) == 0 {
			// The stream ended (io.EOF) or failed; a last line without its end is incomplete.
			return nil, err
		}
		end := bytes.IndexAny(buf, "\r\n")
		if end < 0 {
			end = len(buf)
		}
		if len(line)+end > r.max+lineSlack {
			return nil, fmt.Errorf("sse: line over %d bytes: %w", r.max+lineSlack, sandbox.ErrTooLarge)
		}
		line = append(line, buf[:end]...)
		if end == len(buf) {
			_, _ = r.br.Discard(end)
			continue
		}
		r.afterCR = buf[end] == '\r'
		_, _ = r.br.Discard(end + 1)
		return line, nil
	}
}
