package bot

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

func TestReadPlatformBody(t *testing.T) {
	const max = 16
	for _, tc := range []struct {
		name   string
		method string
		body   *strings.Reader
		broken bool
		status int // 0: read
	}{
		{"empty", http.MethodPost, strings.NewReader(""), false, 0},
		{"at the cap", http.MethodPost, strings.NewReader(strings.Repeat("a", max)), false, 0},
		{"one past the cap", http.MethodPost, strings.NewReader(strings.Repeat("a", max+1)), false, http.StatusRequestEntityTooLarge},
		{"far past the cap", http.MethodPost, strings.NewReader(strings.Repeat("a", 10*max)), false, http.StatusRequestEntityTooLarge},
		{"GET", http.MethodGet, strings.NewReader(""), false, http.StatusMethodNotAllowed},
		{"a broken read", http.MethodPost, strings.NewReader("abc"), true, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.body.Len()
			r := httptest.NewRequest(tc.method, "/events", tc.body)
			if tc.broken {
				r = httptest.NewRequest(tc.method, "/events", iotest.ErrReader(errors.New("connection reset")))
			}
			w := httptest.NewRecorder()
			body, ok := ReadPlatformBody(w, r, max)
			if tc.status == 0 {
				require.True(t, ok)
				require.Len(t, body, want)
				require.Equal(t, http.StatusOK, w.Code, "nothing written")
				return
			}
			require.False(t, ok)
			require.Nil(t, body)
			require.Equal(t, tc.status, w.Code)
		})
	}
}

// TestReadPlatformBodyTrustsNoDeclaredLength: a body declared past the cap is refused before it is
// read; one declared short is still read only up to the cap, and its true length is what counts.
func TestReadPlatformBodyTrustsNoDeclaredLength(t *testing.T) {
	const max = 16
	for _, tc := range []struct {
		name     string
		declared int64
		body     string
		status   int // 0: read
	}{
		{"declared past the cap, never read", max + 1, "", http.StatusRequestEntityTooLarge},
		{"declared short, sent long", 2, strings.Repeat("a", 10*max), http.StatusRequestEntityTooLarge},
		{"declared short, sent within the cap", 2, strings.Repeat("a", max), 0},
		{"declared huge for a small body", 1 << 40, "abc", http.StatusRequestEntityTooLarge},
		{"undeclared", -1, "abc", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src io.Reader = strings.NewReader(tc.body)
			if tc.declared > max {
				src = iotest.ErrReader(errors.New("read a body declared too large"))
			}
			r := httptest.NewRequest(http.MethodPost, "/events", src)
			r.ContentLength = tc.declared
			w := httptest.NewRecorder()
			body, ok := ReadPlatformBody(w, r, max)
			if tc.status == 0 {
				require.True(t, ok)
				require.Equal(t, tc.body, string(body))
				return
			}
			require.False(t, ok)
			require.Equal(t, tc.status, w.Code)
		})
	}
}
