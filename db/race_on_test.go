//go:build race

package db_test

// raceEnabled: the SQLite engine is Go code translated from C, and the race detector slows it about
// thirtyfold, so race runs fill less data where the amount does not matter.
const raceEnabled = true
