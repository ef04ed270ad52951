//go:build !race

package db_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
