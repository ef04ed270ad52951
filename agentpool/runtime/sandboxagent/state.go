package sandboxagent

import (
	"strings"
	"sync"

	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
	"github.com/threadbox/threadbox/sandbox"
)

// sbState is what the runtime remembers about one sandbox's server. All of it can be lost (a bot
// restart): it only saves calls, and each field says what happens without it.
type sbState struct {
	// workDir is the agents' cwd (without it: asked with an exec).
	workDir string
	// gen is the createdAtMs of our ACP server; loaded and systemSent belong to it.
	gen int64
	// loaded are the sessions the ACP process has (without it: session/load again, which replays
	// the history to nobody).
	loaded map[string]bool
	// systemSent are the sessions that got the system prompt (without it: sent once more).
	systemSent map[string]bool
	// lastEventID is the last event seen (without it: the server's buffer is replayed and skipped).
	lastEventID string
	// wedged is set when the agent did not answer initialize while the server answered its health
	// check: the next Ensure restarts the server (without it: the next initialize finds out again).
	wedged bool
	// running holds, per session, a channel closed when its in-flight prompt ends (Abort waits on it).
	running map[string]chan struct{}
}

// states is the per-sandbox memory.
type states struct {
	mu sync.Mutex // protects m and everything in it
	m  map[string]*sbState
}

// with runs f on the sandbox's state under the lock. f must not call out.
func (s *states) with(sb sandbox.Sandbox, f func(st *sbState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := sb.Handle().ID
	st, ok := s.m[id]
	if !ok {
		if len(s.m) >= sandboxhttp.MaxClients {
			// Keep only sandboxes with a turn in flight; the others rebuild what they need.
			for k, v := range s.m {
				if len(v.running) == 0 {
					delete(s.m, k)
				}
			}
		}
		st = &sbState{loaded: map[string]bool{}, systemSent: map[string]bool{}, running: map[string]chan struct{}{}}
		s.m[id] = st
	}
	f(st)
}

func (s *states) setWorkDir(sb sandbox.Sandbox, dir string) {
	s.with(sb, func(st *sbState) { st.workDir = dir })
}

// maxEventID bounds a remembered event id; sandbox-agent's are sequence numbers.
const maxEventID = 128

// setLastEventID records the last event seen, for the next subscription's Last-Event-ID. The id is
// the server's (outside input): one that is long, or no valid header value (which the HTTP client
// would refuse on every later subscription), is not kept, and the next subscription replays what
// the server buffers, which the barrier skips.
func (st *sbState) setLastEventID(id string) {
	st.lastEventID = usableEventID(id)
}

// usableEventID is id when it can be kept and sent back as Last-Event-ID, else "".
func usableEventID(id string) string {
	if len(id) > maxEventID || strings.IndexFunc(id, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return ""
	}
	return id
}

// forget drops what belonged to the previous server process.
func (s *states) forget(sb sandbox.Sandbox) {
	s.with(sb, func(st *sbState) {
		st.gen, st.lastEventID, st.wedged = 0, "", false
		clear(st.loaded)
		clear(st.systemSent)
	})
}

// setGen records our ACP server's generation, forgetting the sessions of an older one.
func (s *states) setGen(sb sandbox.Sandbox, gen int64) {
	s.with(sb, func(st *sbState) {
		if st.gen != gen {
			st.gen, st.lastEventID = gen, ""
			clear(st.loaded)
			clear(st.systemSent)
		}
	})
}
