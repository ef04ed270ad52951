package sandbox

import (
	"io"
	"sync"
)

// CappedWriter passes at most n bytes to w and silently drops the rest, remembering that it did.
// Exec implementations use it so a chatty command cannot exhaust the bot's memory, while the command
// itself keeps running (its pipe is still drained).
type CappedWriter struct {
	mu        sync.Mutex
	w         io.Writer
	left      int64
	truncated bool
}

// NewCappedWriter bounds w (nil discards) to n bytes; n <= 0 means DefaultMaxOutput.
func NewCappedWriter(w io.Writer, n int64) *CappedWriter {
	if n <= 0 {
		n = DefaultMaxOutput
	}
	if w == nil {
		w = io.Discard
	}
	return &CappedWriter{w: w, left: n}
}

// Write always reports len(p) written, so copying goroutines keep draining the source.
func (c *CappedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if int64(len(p)) > c.left {
		p = p[:c.left]
		c.truncated = true
	}
	if len(p) > 0 {
		c.left -= int64(len(p))
		if _, err := c.w.Write(p); err != nil {
			// A failing sink (a closed progress stream) must not kill the command: drop the rest.
			c.left = 0
			c.truncated = true
		}
	}
	return n, nil
}

// Truncated reports whether anything was dropped.
func (c *CappedWriter) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.truncated
}
