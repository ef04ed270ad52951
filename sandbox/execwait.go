package sandbox

import (
	"io"
	"time"
)

// ExecTimeout is what a provider's Exec selects on for ExecRequest.Timeout: a channel that fires
// after d, or nil (never) when d is zero or less. stop releases the timer.
func ExecTimeout(d time.Duration) (timeout <-chan time.Time, stop func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// DrainGrace is how long DrainAfterKill waits for an output stream to end on its own.
const DrainGrace = 5 * time.Second

// DrainAfterKill waits, after an exec was killed, for the copy of its output (copied) to end. A
// process that escaped the kill (it wiped its environment) may hold the stream open, so after grace
// the stream is closed instead and the copy's end awaited; cut reports that, and err is then nil.
func DrainAfterKill(copied <-chan error, stream io.Closer, grace time.Duration) (cut bool, err error) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-copied:
		return false, err
	case <-t.C:
		_ = stream.Close()
		<-copied
		return true, nil
	}
}
