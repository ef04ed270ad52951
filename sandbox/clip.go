package sandbox

import "strings"

// MaxErrorText bounds the text a provider takes from outside (an API's error message, a sandbox's
// output) into an error, which reaches logs and chat threads.
const MaxErrorText = 500

// ClipText cuts s to at most max runes, marking a cut with "…". It looks at no more than 4×max bytes
// (a rune is at most 4), so megabytes are never converted to find the cut.
func ClipText(s string, max int) string {
	cut := len(s) > 4*max
	if cut {
		s = strings.ToValidUTF8(s[:4*max], "") // the byte cut may split a rune
	}
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	if cut {
		return s + "…"
	}
	return s
}
