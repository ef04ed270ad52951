package bot

import (
	"strconv"
	"strings"

	"github.com/threadbox/threadbox/agentpool"
)

// HumanSize renders a byte count in binary units: 512 B, 1.5 KiB, 10 MiB. It is the one size
// formatter for chat and API text (the adapters use it through bot); the domain reports sizes as
// numbers. A count just over a round size keeps its ".0" ("1.0 MiB"), so "1.0 MiB of text; the
// limit is 1 MiB" does not read as equal.
func HumanSize(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v := float64(n)
	unit := ""
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= 1024
		unit = u
		if v < 1024 {
			break
		}
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if v == float64(int64(v)) {
		s = strings.TrimSuffix(s, ".0")
	}
	return s + " " + unit
}

// FileName is the name an attachment gets in the sandbox's input/ (agentpool.SanitizeName): an
// adapter that shows or records a name uses this one, so what the user sees is what the agent gets.
func FileName(name string) string { return agentpool.SanitizeName(name) }
