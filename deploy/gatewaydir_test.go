package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/threadbox/threadbox/sandbox/sandboxtest"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The model gateway (on by default) serves Docker sandboxes through unix sockets and a forwarder
// binary in gateway.socket_dir, which the Docker provider bind-mounts into each sandbox. The Docker
// daemon resolves a bind mount's source on its own host, so the bot must keep that directory at a host
// path mounted into its container at the identical path: in a tmpfs, a container path or an emptyDir
// the daemon finds nothing, and every AI turn fails.

// mount is one filesystem mounted into the bot's container.
type mount struct {
	target string
	// hostSource is the host path of a bind (compose) or hostPath (Kubernetes) mount; empty for
	// anything the Docker daemon cannot see at a path of its host (tmpfs, named volume, emptyDir).
	hostSource string
}

// checkHostVisible fails unless dir is absolute and lies in a host-path mount whose host path equals
// its container path (the deepest mount holding dir decides, as it shadows the others).
func checkHostVisible(dir string, mounts []mount) error {
	if !filepath.IsAbs(dir) {
		return errors.New("gateway socket dir " + strconvQuote(dir) + " is not absolute (it would be under the container's working directory)")
	}
	var best *mount
	for i, m := range mounts {
		if dir == m.target || strings.HasPrefix(dir, strings.TrimSuffix(m.target, "/")+"/") {
			if best == nil || len(m.target) > len(best.target) {
				best = &mounts[i]
			}
		}
	}
	switch {
	case best == nil:
		return errors.New("gateway socket dir " + strconvQuote(dir) + " is in the container's own filesystem, which the Docker daemon cannot see")
	case best.hostSource == "":
		return errors.New("gateway socket dir " + strconvQuote(dir) + " is in " + strconvQuote(best.target) + ", not a host path the Docker daemon can see")
	case best.hostSource != best.target:
		return errors.New("gateway socket dir " + strconvQuote(dir) + ": mount " + strconvQuote(best.target) + " comes from host path " +
			strconvQuote(best.hostSource) + "; the paths must be identical, because the bot hands the daemon its own path")
	}
	return nil
}

func strconvQuote(s string) string { return `"` + s + `"` }

func TestCheckHostVisible(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dir    string
		mounts []mount
		ok     bool
	}{
		{"relative", "./data/gateway", []mount{{target: "/var/lib/threadbox"}}, false},
		{"tmpfs", "/var/lib/threadbox/gateway", []mount{{target: "/var/lib/threadbox"}}, false},
		{"container path", "/srv/gateway", []mount{{target: "/var/lib/threadbox"}}, false},
		{"other host path", "/var/lib/threadbox/gateway", []mount{{target: "/var/lib/threadbox/gateway", hostSource: "/srv/gw"}}, false},
		{"identical bind", "/var/lib/threadbox/gateway", []mount{{target: "/var/lib/threadbox"}, {target: "/var/lib/threadbox/gateway", hostSource: "/var/lib/threadbox/gateway"}}, true},
		{"below identical", "/gw/rel", []mount{{target: "/gw", hostSource: "/gw"}}, true},
		{"shadowed", "/gw/x/y", []mount{{target: "/gw", hostSource: "/gw"}, {target: "/gw/x"}}, false},
		{"prefix is not parent", "/gwx", []mount{{target: "/gw", hostSource: "/gw"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkHostVisible(tc.dir, tc.mounts)
			require.Equal(t, tc.ok, err == nil, "%v", err)
		})
	}
}

// composeDefaults replaces ${VAR}, ${VAR:-default} and ${VAR:?message} with the default (or nothing):
// enough to read paths that compose.yaml spells out.
var composeVar = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*)|:?\?[^}]*)?\}`)

func composeDefaults(s string) string {
	return composeVar.ReplaceAllString(s, "$1")
}

// TestComposeGatewaySocketDirIsOnTheHost: the bot service in compose.yaml keeps the gateway's socket
// dir in a bind mount from the identical host path.
func TestComposeGatewaySocketDirIsOnTheHost(t *testing.T) {
	raw, err := os.ReadFile("compose.yaml")
	require.NoError(t, err)
	var doc struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Volumes     []yaml.Node       `yaml:"volumes"`
			Tmpfs       []string          `yaml:"tmpfs"`
			WorkingDir  string            `yaml:"working_dir"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	bot, ok := doc.Services["bot"]
	require.True(t, ok, "compose.yaml has no bot service")

	dir := composeDefaults(bot.Environment["THREADBOX_GATEWAY_SOCKET_DIR"])
	require.NotEmpty(t, dir, "the bot service does not set THREADBOX_GATEWAY_SOCKET_DIR: the default ./data/gateway is inside the container")
	var mounts []mount
	for _, t := range bot.Tmpfs {
		mounts = append(mounts, mount{target: strings.SplitN(composeDefaults(t), ":", 2)[0]})
	}
	for _, v := range bot.Volumes {
		mounts = append(mounts, composeVolume(t, v))
	}
	require.NoError(t, checkHostVisible(dir, mounts))
}

// composeVolume reads a service volume in the short ("src:dst[:mode]") or long syntax.
func composeVolume(t *testing.T, n yaml.Node) mount {
	t.Helper()
	if n.Kind == yaml.ScalarNode {
		parts := strings.Split(composeDefaults(n.Value), ":")
		require.GreaterOrEqual(t, len(parts), 2, "volume %q", n.Value)
		m := mount{target: parts[1]}
		// A source that is not a path is a named volume.
		if strings.HasPrefix(parts[0], "/") {
			m.hostSource = parts[0]
		}
		return m
	}
	var long struct {
		Type, Source, Target string
	}
	require.NoError(t, n.Decode(&long))
	m := mount{target: composeDefaults(long.Target)}
	if long.Type == "bind" {
		m.hostSource = composeDefaults(long.Source)
	}
	return m
}

// helm returns the command that runs Helm: helm on PATH, else the version `make lint-deploy` pins,
// through the Go module proxy (cached once make lint has run). Without either, the test is skipped,
// or fails when THREADBOX_REQUIRE_SERVICES is set (make test).
func helm(t *testing.T) []string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return []string{p}
	}
	mk, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^HELM_VERSION\s*\?=\s*(\S+)`).FindSubmatch(mk)
	require.NotNil(t, m, "HELM_VERSION in the Makefile")
	cmd := []string{"go", "run", "helm.sh/helm/v3/cmd/helm@" + string(m[1])}
	if out, err := exec.Command(cmd[0], append(cmd[1:], "version")...).CombinedOutput(); err != nil {
		sandboxtest.RequireService(t, "helm (installed, or through the module proxy)", fmt.Errorf("%w: %s", err, out))
	}
	return cmd
}

// k8sDeployment is the part of the chart's Deployment this test reads.
type k8sDeployment struct {
	Kind     string
	Metadata struct{ Name string }
	Spec     struct {
		Template struct {
			Spec struct {
				InitContainers []k8sContainer `yaml:"initContainers"`
				Containers     []k8sContainer
				Volumes        []struct {
					Name     string
					HostPath *struct{ Path, Type string } `yaml:"hostPath"`
				}
			}
		}
	}
}

type k8sContainer struct {
	Name string
	Env  []struct {
		Name, Value string
	}
	VolumeMounts []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

func renderDeployment(t *testing.T, release string, set ...string) k8sDeployment {
	t.Helper()
	args := append(helm(t), "template", release, "helm/threadbox", "--namespace", "ns1")
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "helm template: %s", stderr.String())
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var d k8sDeployment
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if d.Kind == "Deployment" {
			return d
		}
	}
	t.Fatal("helm template rendered no Deployment")
	return k8sDeployment{}
}

// TestHelmGatewaySocketDirIsOnTheNode: with the Docker provider on the node's engine, the chart keeps
// the gateway's socket dir in a hostPath mounted at the identical path, one of its own per release
// (two releases on a node must not share sandbox directories).
func TestHelmGatewaySocketDirIsOnTheNode(t *testing.T) {
	helm(t) // skips the test when Helm cannot run
	dirs := map[string]string{}
	for _, tc := range []struct {
		name, release string
		set           []string
	}{
		{"default", "threadbox", nil},
		{"other release", "tb2", nil},
		{"several providers, one replica", "threadbox", []string{"sandbox.providers={docker,daytona,deno}", "replicaCount=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := renderDeployment(t, tc.release, tc.set...)
			spec := d.Spec.Template.Spec
			require.NotEmpty(t, spec.Containers)
			bot := spec.Containers[0]
			var dir string
			for _, e := range bot.Env {
				if e.Name == "THREADBOX_GATEWAY_SOCKET_DIR" {
					dir = e.Value
				}
			}
			require.NotEmpty(t, dir, "the bot container does not set THREADBOX_GATEWAY_SOCKET_DIR: the default ./data/gateway is in an emptyDir")
			hostPaths := map[string]string{}
			for _, v := range spec.Volumes {
				if v.HostPath != nil && v.HostPath.Type != "Socket" {
					hostPaths[v.Name] = v.HostPath.Path
				}
			}
			var mounts []mount
			for _, vm := range bot.VolumeMounts {
				m := mount{target: vm.MountPath}
				if p, ok := hostPaths[vm.Name]; ok {
					m.hostSource = filepath.Join(p, vm.SubPath)
				}
				mounts = append(mounts, m)
			}
			require.NoError(t, checkHostVisible(dir, mounts))
			if tc.set == nil {
				dirs[tc.release] = dir
			}
		})
	}
	require.NotEqual(t, dirs["threadbox"], dirs["tb2"], "two releases share a gateway dir")

	// A remote engine (no socket mounted) cannot see the node at all: no hostPath is made for it.
	d := renderDeployment(t, "threadbox", "sandbox.provider=daytona")
	for _, v := range d.Spec.Template.Spec.Volumes {
		require.Nil(t, v.HostPath, "volume %s: a hostPath without the Docker provider", v.Name)
	}
}
