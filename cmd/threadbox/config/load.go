package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix starts every environment override.
const EnvPrefix = "THREADBOX_"

// reservedEnv are THREADBOX_ variables that are not config keys, so they are not reported as unknown.
var reservedEnv = []string{"CONFIG", "REQUIRE_SERVICES", "TEST_", "CACHE_DIR", "DEBIAN_MIRROR"}

// Loaded is a validated configuration plus what the loader noticed on the way.
type Loaded struct {
	Config
	// File is the YAML file read, or "" when running on defaults.
	File string
	// Warnings are non-fatal findings (an unknown THREADBOX_ variable, say), to log at startup.
	Warnings []string
}

// Load reads the file at path (none when empty), applies the environment environ (os.Environ()
// form), and validates.
func Load(path string, environ []string) (Loaded, error) {
	out := Loaded{Config: Default(), File: path}
	k := koanf.New(".")
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return out, fmt.Errorf("config file %s: %w", path, err)
		}
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return out, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	envMap, warnings, err := envOverrides(environ)
	if err != nil {
		return out, err
	}
	out.Warnings = warnings
	if err := k.Load(confmap.Provider(envMap, "."), nil); err != nil {
		return out, fmt.Errorf("environment: %w", err)
	}
	dec := &mapstructure.DecoderConfig{
		TagName:          "koanf",
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		Result:           &out.Config,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			unitlessDurationHook,
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		),
	}
	if err := k.UnmarshalWithConf("", &out.Config, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: dec}); err != nil {
		return out, fmt.Errorf("config%s: %w", fileSuffix(path), cleanDecodeError(err))
	}
	if err := out.Config.Validate(); err != nil {
		return out, fmt.Errorf("config%s: %w", fileSuffix(path), err)
	}
	if !out.HTTP.Loopback() && out.HTTP.Token == "" {
		out.Warnings = append(out.Warnings, fmt.Sprintf("http.addr %s is not loopback and http.token is empty: "+
			"the web chat and admin API will refuse every remote client", out.HTTP.Addr))
	}
	return out, nil
}

// unitlessDurationHook refuses a bare number for a duration. YAML reads "shutdown_grace: 30" as an
// integer, and decoded weakly it would count nanoseconds: 30 ns of grace, or an hour's exec timeout
// written as 3600 rejected as 3.6µs. 0 needs no unit.
func unitlessDurationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	v := reflect.ValueOf(data)
	var zero bool
	switch {
	case v.CanInt():
		zero = v.Int() == 0
	case v.CanUint():
		zero = v.Uint() == 0
	case v.CanFloat():
		zero = v.Float() == 0
	default:
		return data, nil
	}
	if zero {
		return time.Duration(0), nil
	}
	return nil, fmt.Errorf("%v has no unit: write it with one, for example %vs or %vm", data, data, data)
}

func fileSuffix(path string) string {
	if path == "" {
		return ""
	}
	return " " + path
}

// cleanDecodeError keeps mapstructure's messages (they name the key) on one line, without the
// "decoding failed" preamble.
func cleanDecodeError(err error) error {
	msg := err.Error()
	if _, rest, ok := strings.Cut(msg, "error(s):"); ok {
		msg = rest
	}
	var parts []string
	for _, line := range strings.Split(msg, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, line)
		}
	}
	return errors.New(strings.Join(parts, "; "))
}

// key is one configurable leaf.
type key struct {
	path string
	kind reflect.Kind
}

// keys lists every leaf key of Config, in dotted form, from the struct tags: the env mapping and the
// example-file test both derive from it, so neither can drift from the struct.
func keys() []key {
	var out []key
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("koanf")
			if tag == "" || tag == "-" {
				continue
			}
			p := prefix + tag
			if f.Type.Kind() == reflect.Struct && f.Type.String() != "time.Time" {
				walk(f.Type, p+".")
				continue
			}
			out = append(out, key{path: p, kind: f.Type.Kind()})
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// Keys returns every dotted config key, sorted.
func Keys() []string {
	var out []string
	for _, k := range keys() {
		out = append(out, k.path)
	}
	return out
}

// EnvName is the environment variable that overrides a dotted key.
func EnvName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// envOverrides maps THREADBOX_* variables onto dotted keys. Map keys (sandbox.env.set) take the rest of
// the name as the map key, verbatim: THREADBOX_SANDBOX_ENV_SET_FOO=1 sets FOO.
func envOverrides(environ []string) (map[string]any, []string, error) {
	byEnv := map[string]key{}
	var mapKeys []key
	for _, k := range keys() {
		byEnv[EnvName(k.path)] = k
		if k.kind == reflect.Map {
			mapKeys = append(mapKeys, k)
		}
	}
	out := map[string]any{}
	var warnings []string
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		if k, ok := byEnv[name]; ok {
			if k.kind == reflect.Map {
				return nil, nil, fmt.Errorf("%s: set entries one by one, as %s_<NAME>", name, name)
			}
			if val == "" && scalar(k.kind) {
				// Decoded weakly, "" would be 0 or false: no sandbox cap, a writable root, unnoticed.
				return nil, nil, fmt.Errorf("%s (%s): empty; unset it to keep the default, or give a value", name, k.path)
			}
			out[k.path] = val
			continue
		}
		matched := false
		for _, k := range mapKeys {
			if p := EnvName(k.path) + "_"; strings.HasPrefix(name, p) && len(name) > len(p) {
				// The map key goes in as one path element, so a dot in it cannot nest.
				m, _ := out[k.path].(map[string]any)
				if m == nil {
					m = map[string]any{}
					out[k.path] = m
				}
				m[strings.TrimPrefix(name, p)] = val
				matched = true
				break
			}
		}
		if !matched && !isReserved(name) {
			warnings = append(warnings, fmt.Sprintf("%s is not a config key and is ignored (every key is in deploy/threadbox.example.yaml)", name))
		}
	}
	return unflatten(out), warnings, nil
}

// unflatten turns {"a.b": v} into {"a": {"b": v}} so koanf does not split map keys containing dots.
func unflatten(flat map[string]any) map[string]any {
	out := map[string]any{}
	for p, v := range flat {
		parts := strings.Split(p, ".")
		m := out
		for _, part := range parts[:len(parts)-1] {
			next, _ := m[part].(map[string]any)
			if next == nil {
				next = map[string]any{}
				m[part] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = v
	}
	return out
}

func isReserved(name string) bool {
	rest := strings.TrimPrefix(name, EnvPrefix)
	for _, r := range reservedEnv {
		if rest == r || strings.HasSuffix(r, "_") && strings.HasPrefix(rest, r) {
			return true
		}
	}
	return false
}

// scalar reports whether a key of this kind is a number, a duration or a bool, for which an empty
// value means nothing.
func scalar(k reflect.Kind) bool {
	switch k {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}
