package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// readAll reads events until the stream ends or fails.
func readAll(stream string, max int) ([]Event, error) {
	r := NewReader(strings.NewReader(stream), max)
	var out []Event
	for {
		ev, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestReader(t *testing.T) {
	tests := []struct {
		name    string
		stream  string
		max     int
		want    []Event
		wantErr error
	}{
		{"one event", "data: {}\n\n", 0, []Event{{Data: []byte("{}")}}, io.EOF},
		{"ids are kept until replaced", "id: 1\ndata: a\n\ndata: b\n\nid: 3\ndata: c\n\n", 0,
			[]Event{{ID: "1", Data: []byte("a")}, {ID: "1", Data: []byte("b")}, {ID: "3", Data: []byte("c")}}, io.EOF},
		{"data lines are joined", "data: a\ndata:b\ndata:  c\n\n", 0, []Event{{Data: []byte("a\nb\n c")}}, io.EOF},
		{"comments, other fields and empty events are skipped", ": ping\nevent: x\nretry: 5\n\n\n\ndata: a\n\n", 0,
			[]Event{{Data: []byte("a")}}, io.EOF},
		{"crlf", "data: a\r\n\r\n", 0, []Event{{Data: []byte("a")}}, io.EOF},
		{"bare cr", "data: a\r\rdata: b\r\r", 0, []Event{{Data: []byte("a")}, {Data: []byte("b")}}, io.EOF},
		{"cr, lf and crlf mixed", "data: a\rdata: b\n\r\ndata: c\r\n\rid: 7\n\ndata: d\n\n", 0,
			[]Event{{Data: []byte("a\nb")}, {Data: []byte("c")}, {ID: "7", Data: []byte("d")}}, io.EOF},
		{"cr then lf is one line end, lf then cr two", "data: a\r\n\r\n\rdata: b\n\r", 0,
			[]Event{{Data: []byte("a")}, {Data: []byte("b")}}, io.EOF},
		{"a cr-ended line over the bound", "data: " + strings.Repeat("x", 9) + "\r\r", 8, nil, sandbox.ErrTooLarge},
		{"an endless line with NULs, no line end", strings.Repeat("y\x00", 1<<19), 1024, nil, sandbox.ErrTooLarge},
		{"an event cut off by the end is dropped", "data: a\n\ndata: b\n", 0, []Event{{Data: []byte("a")}}, io.EOF},
		{"data of exactly the bound", "data: " + strings.Repeat("x", 8) + "\n\n", 8, []Event{{Data: []byte(strings.Repeat("x", 8))}}, io.EOF},
		{"one line over the bound", "data: a\n\ndata: " + strings.Repeat("x", 9) + "\n\n", 8, []Event{{Data: []byte("a")}}, sandbox.ErrTooLarge},
		{"a comment over the bound", ": " + strings.Repeat("x", 100) + "\ndata: a\n\n", 8, nil, sandbox.ErrTooLarge},
		{"an event over the bound in many lines", strings.Repeat("data: xx\n", 5) + "\n", 8, nil, sandbox.ErrTooLarge},
		{"an endless line, no newline", strings.Repeat("y", 1<<20), 1024, nil, sandbox.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAll(tt.stream, tt.max)
			require.ErrorIs(t, err, tt.wantErr)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestReaderBareCRDoesNotWait: an event whose blank line is a bare CR is returned at once, without
// waiting for a byte after it (which could be an LF belonging to that line end).
func TestReaderBareCRDoesNotWait(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("data: a\r\r")) }()
	ev, err := NewReader(pr, 0).Next()
	require.NoError(t, err)
	require.Equal(t, "a", string(ev.Data))
}

func TestReaderDefaultBound(t *testing.T) {
	big := "data: " + strings.Repeat("z", MaxEventBytes+1) + "\n\n"
	_, err := readAll(big, 0)
	require.ErrorIs(t, err, sandbox.ErrTooLarge)
}

// FuzzReader: on any stream the reader ends (EOF or ErrTooLarge, nothing else from a bytes reader),
// never returns data over its bound, and never returns more data than the stream held.
func FuzzReader(f *testing.F) {
	f.Add([]byte("id: 1\ndata: {\"a\":1}\n\n: ping\n\ndata: x\r\ndata: y\r\n\r\n"), 16)
	f.Add([]byte("data:"+strings.Repeat("x", 100)+"\n\n"), 8)
	f.Add([]byte("\r\r\r\n\n\n"), 1)
	f.Fuzz(func(t *testing.T, stream []byte, max int) {
		max = 1 + int(uint(max)%256)
		r := NewReader(bytes.NewReader(stream), max)
		total := 0
		for range len(stream) + 1 {
			ev, err := r.Next()
			if err != nil {
				require.True(t, errors.Is(err, io.EOF) || errors.Is(err, sandbox.ErrTooLarge), "unexpected error %v", err)
				return
			}
			require.LessOrEqual(t, len(ev.Data), max)
			total += len(ev.Data)
			require.LessOrEqual(t, total, len(stream))
		}
		require.Fail(t, "more events than bytes in the stream")
	})
}
