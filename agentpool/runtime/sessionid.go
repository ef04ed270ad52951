package runtime

import (
	"fmt"
	"strings"
)

// MaxSessionIDBytes bounds an agent session id a runtime accepts from its agent. Real ids are tens
// of characters (opencode's "ses_…", a UUID).
const MaxSessionIDBytes = 256

// CheckSessionID refuses a session id an agent server gave that the pool cannot keep and send back:
// empty, longer than MaxSessionIDBytes, or with a byte that is not printable ASCII. The server is in
// the sandbox, which the agent controls; the id is stored with the thread and reused in later calls.
func CheckSessionID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("the agent gave an empty session id")
	case len(id) > MaxSessionIDBytes:
		return fmt.Errorf("the agent gave a session id of %d bytes (at most %d)", len(id), MaxSessionIDBytes)
	case strings.IndexFunc(id, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0:
		return fmt.Errorf("the agent gave a session id with a byte that is not printable ASCII: %q", id[:min(len(id), 40)])
	}
	return nil
}
