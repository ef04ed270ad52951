package sandbox

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExecTimeout(t *testing.T) {
	tests := []struct {
		name  string
		d     time.Duration
		fires bool
	}{
		{name: "zero: never", d: 0},
		{name: "negative: never", d: -time.Second},
		{name: "set: fires after d", d: time.Minute, fires: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, stop := ExecTimeout(tt.d)
				defer stop()
				if !tt.fires {
					require.Nil(t, c)
					return
				}
				start := time.Now()
				<-c
				require.Equal(t, tt.d, time.Since(start))
			})
		})
	}
}

type closeRecorder struct {
	closed chan struct{}
}

func (c *closeRecorder) Close() error { close(c.closed); return nil }

func TestDrainAfterKill(t *testing.T) {
	errCopy := errors.New("stream broke")
	tests := []struct {
		name    string
		endsIn  time.Duration // when the copy ends on its own; 0: only once the stream is closed
		copyErr error
		wantCut bool
		wantErr error
	}{
		{name: "the stream ends in time", endsIn: time.Second},
		{name: "the copy's error is returned", endsIn: time.Second, copyErr: errCopy, wantErr: errCopy},
		{name: "a held stream is cut after the grace", wantCut: true},
		{name: "a cut stream's copy error is not the caller's", copyErr: errCopy, wantCut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				stream := &closeRecorder{closed: make(chan struct{})}
				copied := make(chan error, 1)
				go func() {
					if tt.endsIn > 0 {
						time.Sleep(tt.endsIn) // fake clock: the process's own end
					} else {
						<-stream.closed
					}
					copied <- tt.copyErr
				}()
				start := time.Now()
				cut, err := DrainAfterKill(copied, stream, 3*time.Second)
				require.Equal(t, tt.wantCut, cut)
				require.ErrorIs(t, err, tt.wantErr)
				if tt.wantErr == nil {
					require.NoError(t, err)
				}
				if tt.wantCut {
					require.Equal(t, 3*time.Second, time.Since(start))
				} else {
					require.Equal(t, tt.endsIn, time.Since(start))
					select {
					case <-stream.closed:
						t.Fatal("a stream that ended was closed")
					default:
					}
				}
			})
		})
	}
}
