package db

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIntakeAlone: a turn is recorded on a connection of its own (and started in that commit) only
// while nothing else is being recorded; in a burst, waiting, batching or another turn alone sends it
// to the group commit, where one commit serves them all.
func TestIntakeAlone(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		waiting, running, alone int
		want                    bool
	}{
		{"idle", 0, 0, 0, true},
		{"others waiting for a batch", 1, 0, 0, false},
		{"a batch committing", 0, 1, 0, false},
		{"another turn alone", 0, 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &pgIntake{waiting: make([]*intakeReq, tc.waiting), running: tc.running, alone: tc.alone}
			require.Equal(t, tc.want, in.takeAlone())
			if tc.want {
				require.False(t, in.takeAlone(), "one at a time")
				in.doneAlone()
				require.True(t, in.takeAlone())
			}
		})
	}
}
