package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/threadbox/threadbox/db"
)

// deployDir is deploy/ from this package (cmd/threadbox/metrics).
const deployDir = "../../../deploy/"

var seriesName = regexp.MustCompile(`threadbox_[a-z_]+`)

// knownSeries is every series name the registry serves, histograms with their _bucket, _count, _sum.
func knownSeries(t *testing.T) map[string]bool {
	t.Helper()
	m := New(fakeSessions{{ThreadKey: "a", Status: db.SessionActive, Provider: "docker"}}, nil)
	exercise(m)
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	known := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		known[n] = true
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			known[n+suffix] = true
		}
	}
	return known
}

func requireKnown(t *testing.T, known map[string]bool, where, expr string) {
	t.Helper()
	names := seriesName.FindAllString(expr, -1)
	require.NotEmpty(t, names, "%s: %s uses no threadbox metric", where, expr)
	for _, n := range names {
		require.True(t, known[n], "%s: %s is not a metric Threadbox serves (%s)", where, n, expr)
	}
}

// TestAlertsDashboardAndRunbookMatchTheMetrics: every series the example alerts and the dashboard use
// exists, and every alert has its runbook section, which its runbook_url names.
func TestAlertsDashboardAndRunbookMatchTheMetrics(t *testing.T) {
	known := knownSeries(t)
	runbook, err := os.ReadFile(deployDir + "runbook.md")
	require.NoError(t, err)

	raw, err := os.ReadFile(deployDir + "prometheus/alerts.yaml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	require.NotEmpty(t, rules.Groups)
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			if r.Alert != "ThreadboxDown" { // up{} is Prometheus's own
				requireKnown(t, known, r.Alert, r.Expr)
			}
			requireSessionsSummedPerReplica(t, r.Alert, r.Expr)
			require.Contains(t, string(runbook), "### Alert: "+r.Alert, "a runbook section for %s", r.Alert)
			require.Equal(t, "deploy/runbook.md#alert-"+strings.ToLower(r.Alert), r.Annotations["runbook_url"])
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		}
	}
	require.Equal(t, alerts, strings.Count(string(runbook), "### Alert: "), "no runbook section without its alert")
	require.GreaterOrEqual(t, strings.Count(string(runbook), "### Row: "), 7, "one section per failure-matrix row")

	raw, err = os.ReadFile(deployDir + "grafana/threadbox-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			requireKnown(t, known, p.Title, tg.Expr)
		}
	}
}

// requireSessionsSummedPerReplica: threadbox_sessions has one series per status and provider, and
// every replica serves the same figures. A threshold on the number of sessions must add the
// providers up within one replica before taking the max over replicas: max alone compared the
// largest provider's count, so 3 error sessions on docker and 3 on daytona (6) never crossed "> 5".
func requireSessionsSummedPerReplica(t *testing.T, alert, expr string) {
	t.Helper()
	if !strings.Contains(expr, "threadbox_sessions{") && !strings.Contains(expr, "threadbox_sessions)") {
		return
	}
	require.Regexp(t, `sum by \(instance\) \(threadbox_sessions[{)]`, expr,
		"%s: count the sessions of all providers, per replica (sum by (instance)), then max over replicas", alert)
}
