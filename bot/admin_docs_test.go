package bot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminCommandsDocumented: every admin command is in the runbook's admin table and in the
// README's `threadbox admin` line, where operators look for them.
func TestAdminCommandsDocumented(t *testing.T) {
	runbook := readDoc(t, "deploy", "runbook.md")
	_, table, _ := strings.Cut(runbook, "\n## Admin commands\n")
	table, _, _ = strings.Cut(table, "\n## ")
	readme := readDoc(t, "README.md")
	_, cli, _ := strings.Cut(readme, "| `threadbox admin <command>` |")
	cli, _, _ = strings.Cut(cli, "\n")
	for cmd := range adminCommands {
		if cmd == "help" {
			continue
		}
		if !strings.Contains(table, "| `"+cmd) && !strings.Contains(table, "/ `"+cmd) {
			t.Errorf("admin command %s is not in deploy/runbook.md's Admin commands table", cmd)
		}
		if !strings.Contains(cli, "`"+cmd) {
			t.Errorf("admin command %s is not in the README's threadbox admin row", cmd)
		}
	}
}

func readDoc(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{".."}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
