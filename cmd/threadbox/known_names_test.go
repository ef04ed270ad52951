package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
)

// TestKnownNamesMatchConfig: the names the bot takes for "use <provider>" and "runtime <name>" are
// the ones the config knows, so adding a provider or runtime there keeps its command a command.
func TestKnownNamesMatchConfig(t *testing.T) {
	notAuto := func(s string) bool { return s == "auto" }
	require.ElementsMatch(t, slices.DeleteFunc(slices.Clone(config.Providers), notAuto), bot.KnownProviders)
	require.ElementsMatch(t, slices.DeleteFunc(slices.Clone(config.Runtimes), notAuto), bot.KnownRuntimes)
}
