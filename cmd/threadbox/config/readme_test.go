package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadmeConfigTableMatchesCode keeps the README's configuration table true: every key it names
// (braces and a trailing * expanded) is a key the code knows, and a default written as one literal
// (`20`, `true`, `1h`, `auto`), or as "empty", is the embedded default.
func TestReadmeConfigTableMatchesCode(t *testing.T) {
	rows := readmeConfigRows(t)
	require.NotEmpty(t, rows, "the README's configuration table was not found")
	known := Keys()
	for _, row := range rows {
		for _, k := range expandReadmeKey(row.key) {
			if prefix, ok := strings.CutSuffix(k, "*"); ok {
				if !slices.ContainsFunc(known, func(s string) bool { return strings.HasPrefix(s, prefix) }) {
					t.Errorf("README configuration table: %s matches no config key", k)
				}
				continue
			}
			if !slices.Contains(known, k) {
				t.Errorf("README configuration table: %s is not a config key", k)
				continue
			}
			checkReadmeDefault(t, k, row.def)
		}
	}
}

type readmeRow struct{ key, def string }

// readmeConfigRows returns the rows of the table under "## Configuration" whose header is
// "| key | default | meaning |".
func readmeConfigRows(t *testing.T) []readmeRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Configuration\n")
	require.True(t, ok, "README has no Configuration section")
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []readmeRow
	in := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(line, "| key | default |"):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "| `"):
			cells := strings.Split(line, "|")
			rows = append(rows, readmeRow{key: strings.TrimSpace(cells[1]), def: strings.TrimSpace(cells[2])})
		case in:
			return rows
		}
	}
	return rows
}

// expandReadmeKey turns "`a.{b,c}`, `d`" into a.b, a.c, d.
func expandReadmeKey(cell string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
		k := m[1]
		open, close := strings.Index(k, "{"), strings.Index(k, "}")
		if open < 0 || close < open {
			out = append(out, k)
			continue
		}
		for _, alt := range strings.Split(k[open+1:close], ",") {
			out = append(out, k[:open]+alt+k[close+1:])
		}
	}
	return out
}

// checkReadmeDefault compares a default cell with Default()'s value of key, when the cell is one
// backquoted literal or "empty"; prose cells are left to the reader.
func checkReadmeDefault(t *testing.T, key, cell string) {
	t.Helper()
	v := defaultValue(t, key)
	switch {
	case cell == "empty":
		empty := v.IsZero() || (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0
		if !empty {
			t.Errorf("README says %s defaults to empty; the code's default is %v", key, v.Interface())
		}
	case regexp.MustCompile("^`[^`]+`( \\(no cap\\))?$").MatchString(cell):
		lit, _, _ := strings.Cut(strings.Trim(cell, "`"), "`")
		if d, ok := v.Interface().(time.Duration); ok {
			want, err := time.ParseDuration(lit)
			if err != nil || want != d {
				t.Errorf("README says %s defaults to %s; the code's default is %s", key, lit, d)
			}
			return
		}
		if got := fmt.Sprint(v.Interface()); got != lit {
			t.Errorf("README says %s defaults to %s; the code's default is %s", key, lit, got)
		}
	}
}

// defaultValue walks Default() along the koanf tags of a dotted key.
func defaultValue(t *testing.T, key string) reflect.Value {
	t.Helper()
	v := reflect.ValueOf(Default())
	for _, part := range strings.Split(key, ".") {
		i := slices.IndexFunc(reflect.VisibleFields(v.Type()), func(f reflect.StructField) bool {
			return f.Tag.Get("koanf") == part
		})
		require.GreaterOrEqual(t, i, 0, "no field %s in %s", part, key)
		v = v.Field(i)
	}
	return v
}
