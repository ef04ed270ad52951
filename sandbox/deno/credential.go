package deno

import (
	"fmt"
	"sort"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
)

// checkEnvValues refuses an environment carrying the Deno token in any value: the blocklist keeps
// secrets out by variable name only, and the provider's own credential must not enter under another
// name either. The error names the variable, never the value.
func (p *Provider) checkEnvValues(env map[string]string) error {
	if k := p.carrier(env); k != "" {
		return fmt.Errorf("%w: environment variable %s carries the Deno token: a provider credential never enters a sandbox", sandbox.ErrInvalidSpec, k)
	}
	return nil
}

// carrier returns the first name (sorted) whose value contains the token, or "".
func (p *Provider) carrier(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k, v := range env {
		if p.opts.Token != "" && strings.Contains(v, p.opts.Token) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	sort.Strings(keys)
	return keys[0]
}
