// Package deploy holds tests of the operator scripts in this directory.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFuzzScriptRunsOnlyTheModulesTargets runs fuzz.sh (make fuzz) in a scratch module whose tree also
// holds Go test files that are not the module's packages: a testdata directory, and data/ (where
// make run keeps the local provider's sandboxes and so any checkout a thread made). Only the
// module's own target may be fuzzed; go test on the others fails ("main module does not contain
// package") and failed the whole run. A fake go records what would be fuzzed.
func TestFuzzScriptRunsOnlyTheModulesTargets(t *testing.T) {
	realGo, err := exec.LookPath("go")
	require.NoError(t, err)
	root := t.TempDir()
	fuzzTarget := func(name string) string {
		return "package p\n\nimport \"testing\"\n\nfunc " + name + "(f *testing.F) {}\n"
	}
	files := map[string]string{
		"go.mod":                           "module example.com/m\n\ngo 1.21\n",
		"p/p.go":                           "package p\n",
		"p/p_test.go":                      fuzzTarget("FuzzOwn"),
		"p/testdata/x_test.go":             fuzzTarget("FuzzTestdata"),
		"data/sandboxes/s1/work/x_test.go": fuzzTarget("FuzzSandbox"),
		"data/sandboxes/s1/work/go.mod":    "module example.com/checkout\n\ngo 1.21\n",
	}
	script, err := os.ReadFile("fuzz.sh")
	require.NoError(t, err)
	files["deploy/fuzz.sh"] = string(script)
	log := filepath.Join(t.TempDir(), "fuzzed")
	files["fakego"] = "#!/usr/bin/env bash\nif [ \"$1\" = test ]; then echo \"$*\" >>" + log + "; exit 0; fi\nexec " + realGo + " \"$@\"\n"
	for name, body := range files {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	}

	cmd := exec.Command("bash", filepath.Join(root, "deploy", "fuzz.sh"))
	cmd.Env = append(os.Environ(), "GO="+filepath.Join(root, "fakego"), "FUZZTIME=1s", "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	got, err := os.ReadFile(log)
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	require.Len(t, lines, 1, "fuzzed: %s", got)
	require.Contains(t, lines[0], "^FuzzOwn$")
	require.Contains(t, lines[0], "./p")
}

// runScratch runs run.sh (make run) in a scratch module, with no Docker and a go that only "builds"
// bin/threadbox as a script that exits at once; it returns the module root. env adds to the
// environment.
func runScratch(t *testing.T, env ...string) string {
	t.Helper()
	root := t.TempDir()
	bin := t.TempDir()
	script, err := os.ReadFile("run.sh")
	require.NoError(t, err)
	files := map[string]string{
		"go.mod":        "module example.com/m\n\ngo 1.21\n",
		"p/p.go":        "package p\n",
		"deploy/run.sh": string(script),
		bin + "/go":     fakeGoBuild,
		bin + "/docker": "#!/bin/sh\nexit 1\n",
	}
	for name, body := range files {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, name)
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	}
	cmd := exec.Command("bash", filepath.Join(root, "deploy", "run.sh"))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "THREADBOX_SANDBOX_IMAGE=", "GO=")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return root
}

// TestRunKeepsDataOutOfTheModule: make run keeps the local provider's sandboxes under data/, where
// an agent writes whatever it likes; Go files there without a go.mod of their own would be packages
// of this module, in go test ./..., go vet ./... and make fuzz. run.sh makes data/ a module of its own.
func TestRunKeepsDataOutOfTheModule(t *testing.T) {
	realGo, err := exec.LookPath("go")
	require.NoError(t, err)
	root := runScratch(t)
	// What an agent on the local provider might leave in its sandbox.
	p := filepath.Join(root, "data", "sandboxes", "s1", "work", "x.go")
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte("package x\n\nfunc broken( {\n"), 0o644))

	cmd := exec.Command(realGo, "list", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "example.com/m/p", strings.TrimSpace(string(out)))
}

// fakeGoBuild is a go that only "builds": it makes its -o a script that exits at once.
const fakeGoBuild = "#!/usr/bin/env bash\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n" +
	"mkdir -p \"$(dirname \"$out\")\"; printf '#!/bin/sh\\nexit 0\\n' >\"$out\"; chmod +x \"$out\"\n"

// TestRunBuildsWithGO: make run GO=… (like make build and make fuzz) builds the bot with that go,
// not whichever go is first on PATH.
func TestRunBuildsWithGO(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "used")
	mine := filepath.Join(dir, "mygo")
	require.NoError(t, os.WriteFile(mine, []byte(fakeGoBuild+"touch "+marker+"\n"), 0o755))
	runScratch(t, "GO="+mine)
	require.FileExists(t, marker, "run.sh did not build with $GO")
}
