package sandbox

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHandleState(t *testing.T) {
	type state struct {
		WorkDir string `json:"workdir,omitempty"`
		UID     int    `json:"uid"`
	}
	h := NewHandle("docker", "c1", 2, state{WorkDir: "/w", UID: 1000})
	require.Equal(t, Handle{Provider: "docker", ID: "c1", Version: 2, State: json.RawMessage(`{"workdir":"/w","uid":1000}`)}, h)

	tests := []struct {
		name    string
		h       Handle
		want    state
		wantErr error
	}{
		{name: "round trip", h: h, want: state{WorkDir: "/w", UID: 1000}},
		{name: "no provider named: taken as ours", h: Handle{ID: "c1", State: json.RawMessage(`{"uid":5}`)}, want: state{WorkDir: "preset", UID: 5}},
		{name: "no state: left as it is", h: Handle{Provider: "docker", ID: "c1", Version: 1}, want: state{WorkDir: "preset"}},
		{name: "an older version is read", h: Handle{Provider: "docker", ID: "c1", Version: 1, State: json.RawMessage(`{"workdir":"/o"}`)},
			want: state{WorkDir: "/o"}},
		{name: "another provider's handle", h: Handle{Provider: "daytona", ID: "c1"}, want: state{WorkDir: "preset"}, wantErr: ErrInvalidSpec},
		{name: "empty id", h: Handle{Provider: "docker"}, want: state{WorkDir: "preset"}, wantErr: ErrNotFound},
		{name: "a newer version", h: Handle{Provider: "docker", ID: "c1", Version: 3}, want: state{WorkDir: "preset"}, wantErr: ErrInvalidSpec},
		{name: "broken state", h: Handle{Provider: "docker", ID: "c1", State: json.RawMessage(`{"uid":"x"}`)}, want: state{WorkDir: "preset"}, wantErr: ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := state{WorkDir: "preset"}
			err := tt.h.DecodeState("docker", 2, &got)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, got)
		})
	}
}
