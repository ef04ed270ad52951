package bot

import "github.com/threadbox/threadbox/agentpool"

// HumanSize renders a byte count in binary units (512 B, 1.5 KiB, 10 MiB) for chat and API text.
//
// The chat adapters may import only bot (DESIGN §2), and agentpool needs the same formatter for its
// skipped-file notes but may not import bot. So the one implementation lives in agentpool, the
// lowest package that uses it and that bot may import, and this forwards to it: one formatter, every
// size in a reply or an error spelled the same way.
func HumanSize(n int64) string { return agentpool.HumanSize(n) }
