package daytona

import (
	"fmt"
	"sort"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
)

// checkEnvValues refuses an environment carrying the Daytona API key in any value: the blocklist
// keeps secrets out by variable name only, and the provider's own credential must not enter under
// another name either. The error names the variable, never the value.
func (p *Provider) checkEnvValues(env map[string]string) error {
	var keys []string
	for k, v := range env {
		if p.opts.APIKey != "" && strings.Contains(v, p.opts.APIKey) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	return fmt.Errorf("%w: environment variable %s carries the Daytona API key: a provider credential never enters a sandbox", sandbox.ErrInvalidSpec, keys[0])
}
