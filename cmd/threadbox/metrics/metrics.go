// Package metrics is Threadbox's Prometheus instrumentation: it implements agentpool.Metrics and
// bot.ChatMetrics with client_golang, counts sessions from the store when scraped, and serves
// /metrics. It lives under cmd/threadbox so that agentpool and bot import no metrics library
// (DESIGN §2). Every process builds its own Registry: nothing is registered globally.
package metrics

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/db"
)

const namespace = "threadbox"

// Buckets. Turns and resolves span milliseconds (a warm reuse) to many minutes (a cold create with an
// AI runtime, a long agent turn).
var (
	turnBuckets    = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	resolveBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	passBuckets    = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30}
)

// Metrics is the process's instruments and their registry.
type Metrics struct {
	reg *prometheus.Registry

	turnsQueued    prometheus.Gauge
	turnsInFlight  prometheus.Gauge
	turnsStarted   prometheus.Counter
	turnsFinished  *prometheus.CounterVec
	queueWait      prometheus.Histogram
	turnDuration   *prometheus.HistogramVec
	resolves       *prometheus.CounterVec
	resolveLatency *prometheus.HistogramVec
	promptRetries  *prometheus.CounterVec
	healthRetries  *prometheus.CounterVec
	restarts       *prometheus.CounterVec
	passes         *prometheus.CounterVec
	passDuration   *prometheus.HistogramVec
	passItems      *prometheus.CounterVec
	leader         prometheus.Gauge
	sandboxesLive  *prometheus.GaugeVec
	providerDown   *prometheus.CounterVec
	sandboxesOrph  *prometheus.GaugeVec
	chatReceived   *prometheus.CounterVec
	chatDeduped    *prometheus.CounterVec
	chatRefused    *prometheus.CounterVec
	chatAcks       *prometheus.CounterVec
	chatUploads    *prometheus.CounterVec
}

var (
	_ agentpool.Metrics = (*Metrics)(nil)
	_ bot.ChatMetrics   = (*Metrics)(nil)
)

// New builds the instruments on a registry of their own, with the Go runtime and process collectors.
// store, if not nil, is counted by session status and provider at every scrape.
// log, nil for none, has what a scrape could not count (the response only says it could not).
func New(store SessionCounter, log *zap.Logger) *Metrics {
	if log == nil {
		log = zap.NewNop()
	}
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{reg: reg}
	m.turnsQueued = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "turns_queued",
		Help: "Turns waiting on their thread's queue in this process."})
	m.turnsInFlight = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "turns_in_flight",
		Help: "Turns running in this process (admission, resolve, prompt, delivery)."})
	m.turnsStarted = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "turns_started_total",
		Help: "Turns taken off their queue and started."})
	m.turnsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "turns_finished_total",
		Help: "Turns ended, by outcome (done, failed, cancelled, taken_over, left_queued)."}, []string{"outcome"})
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "turn_queue_wait_seconds",
		Help: "Time a turn waited on its thread's queue before it started.", Buckets: turnBuckets})
	m.turnDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "turn_duration_seconds",
		Help: "Time from a turn's start to its outcome being recorded (just before delivery), by outcome.", Buckets: turnBuckets}, []string{"outcome"})
	m.resolves = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "resolves_total",
		Help: "Sandbox and agent session resolves, by provider and outcome (reuse, resume, create, recreate, session_replaced, error)."},
		[]string{"provider", "outcome"})
	m.resolveLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "resolve_duration_seconds",
		Help: "Latency of a resolve, by provider and outcome.", Buckets: resolveBuckets}, []string{"provider", "outcome"})
	m.promptRetries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "prompt_retries_total",
		Help: "Prompts run again after a recoverable failure (sandbox down, agent session missing)."}, []string{"provider"})
	m.healthRetries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "health_retries_total",
		Help: "Runtime health checks that failed and were tried again."}, []string{"provider"})
	m.restarts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "runtime_restarts_total",
		Help: "Runtimes brought back by restarting their process after a failed health check."}, []string{"provider"})
	m.passes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "loop_passes_total",
		Help: "Maintenance loop passes run by the leader, by pass and result (ok, error)."}, []string{"pass", "result"})
	m.passDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "loop_pass_duration_seconds",
		Help: "Duration of a maintenance loop pass.", Buckets: passBuckets}, []string{"pass"})
	m.passItems = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "loop_pass_items_total",
		Help: "What maintenance passes did to the items they found: found, done, skipped, failed."}, []string{"pass", "action"})
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "leader",
		Help: "1 while this process holds the maintenance loops' leader lease."})
	m.sandboxesLive = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "sandboxes_live",
		Help: "Sandboxes of this deployment the provider listed at the leader's last reaper pass."}, []string{"provider"})
	m.providerDown = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "provider_down_total",
		Help: "Maintenance passes in which a sandbox provider was unavailable; the pass went on with the other providers."}, []string{"provider", "pass"})
	m.sandboxesOrph = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "sandboxes_unowned",
		Help: "Sandboxes no live session owns, past the reap grace, at the leader's last reaper pass."}, []string{"provider"})
	m.chatReceived = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "chat_events_received_total",
		Help: "Chat events read and verified, before dedupe and limits."}, []string{"platform"})
	m.chatDeduped = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "chat_events_deduped_total",
		Help: "Chat events dropped as redeliveries or duplicates."}, []string{"platform"})
	m.chatRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "chat_events_refused_total",
		Help: "Chat requests refused, by reason (signature, rate_limit, access)."}, []string{"platform", "reason"})
	m.chatAcks = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "chat_acks_total",
		Help: "Chat events acknowledged to the platform."}, []string{"platform"})
	m.chatUploads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "chat_uploads_total",
		Help: "Files shared into threads, by outcome (ok, failed, skipped)."}, []string{"platform", "outcome"})
	for _, c := range []prometheus.Collector{
		m.turnsQueued, m.turnsInFlight, m.turnsStarted, m.turnsFinished, m.queueWait, m.turnDuration,
		m.resolves, m.resolveLatency, m.promptRetries, m.healthRetries, m.restarts,
		m.passes, m.passDuration, m.passItems, m.leader, m.sandboxesLive, m.sandboxesOrph, m.providerDown,
		m.chatReceived, m.chatDeduped, m.chatRefused, m.chatAcks, m.chatUploads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		f(c)
	}
	if store != nil {
		f(&sessionCollector{store: store, log: log})
	}
	return m
}

// Registry is where the instruments live (for tests and the handler).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// TurnQueued implements agentpool.Metrics.
func (m *Metrics) TurnQueued(delta int) { m.turnsQueued.Add(float64(delta)) }

// TurnStarted implements agentpool.Metrics.
func (m *Metrics) TurnStarted(wait time.Duration) {
	m.turnsStarted.Inc()
	m.turnsInFlight.Inc()
	m.queueWait.Observe(wait.Seconds())
}

// TurnFinished implements agentpool.Metrics.
func (m *Metrics) TurnFinished(outcome string, took time.Duration) {
	m.turnsInFlight.Dec()
	m.turnsFinished.WithLabelValues(outcome).Inc()
	m.turnDuration.WithLabelValues(outcome).Observe(took.Seconds())
}

// Resolve implements agentpool.Metrics.
func (m *Metrics) Resolve(provider, outcome string, took time.Duration) {
	m.resolves.WithLabelValues(provider, outcome).Inc()
	m.resolveLatency.WithLabelValues(provider, outcome).Observe(took.Seconds())
}

// Retry implements agentpool.Metrics.
func (m *Metrics) Retry(provider, kind string) {
	switch kind {
	case agentpool.RetryPrompt:
		m.promptRetries.WithLabelValues(provider).Inc()
	case agentpool.RetryHealth:
		m.healthRetries.WithLabelValues(provider).Inc()
	case agentpool.RetryRuntimeRestart:
		m.restarts.WithLabelValues(provider).Inc()
	}
}

// Pass implements agentpool.Metrics.
func (m *Metrics) Pass(name string, rep agentpool.PassReport, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.passes.WithLabelValues(name, result).Inc()
	m.passDuration.WithLabelValues(name).Observe(took.Seconds())
	for action, n := range map[string]int{"found": rep.Found, "done": rep.Done, "skipped": rep.Skipped, "failed": rep.Failed} {
		m.passItems.WithLabelValues(name, action).Add(float64(n))
	}
}

// Leading implements agentpool.Metrics. Losing the lease drops the sandbox gauges: they are the
// leader's reaper's view, and a former leader's last figures would otherwise stay served forever (an
// orphan the new leader reaped long ago still counted by `max by (provider)`).
func (m *Metrics) Leading(leader bool) {
	if leader {
		m.leader.Set(1)
		return
	}
	m.leader.Set(0)
	m.sandboxesLive.Reset()
	m.sandboxesOrph.Reset()
}

// Sandboxes implements agentpool.Metrics.
func (m *Metrics) Sandboxes(provider string, live, unowned int) {
	m.sandboxesLive.WithLabelValues(provider).Set(float64(live))
	m.sandboxesOrph.WithLabelValues(provider).Set(float64(unowned))
}

// ProviderDown implements agentpool.Metrics.
func (m *Metrics) ProviderDown(provider, pass string) {
	m.providerDown.WithLabelValues(provider, pass).Inc()
}

// ChatEvent implements bot.ChatMetrics.
func (m *Metrics) ChatEvent(platform, kind string) {
	switch kind {
	case bot.ChatReceived:
		m.chatReceived.WithLabelValues(platform).Inc()
	case bot.ChatDeduped:
		m.chatDeduped.WithLabelValues(platform).Inc()
	case bot.ChatAck:
		m.chatAcks.WithLabelValues(platform).Inc()
	case bot.ChatRefusedSignature:
		m.chatRefused.WithLabelValues(platform, "signature").Inc()
	case bot.ChatRefusedRateLimit:
		m.chatRefused.WithLabelValues(platform, "rate_limit").Inc()
	case bot.ChatRefusedAccess:
		m.chatRefused.WithLabelValues(platform, "access").Inc()
	}
}

// Upload implements bot.ChatMetrics.
func (m *Metrics) Upload(platform, outcome string) {
	m.chatUploads.WithLabelValues(platform, outcome).Inc()
}

// SessionCounter pages sessions by status; db.Store implements it.
type SessionCounter interface {
	SessionsByStatus(ctx context.Context, status db.SessionStatus, afterThreadKey string, limit int) ([]db.Session, error)
}

// MaxCounted caps the sessions counted per status at one scrape, so that a scrape stays cheap; a
// gauge at the cap means "at least". Destroyed sessions are not counted: they only ever grow.
const MaxCounted = 10000

// scrapeTimeout bounds the store queries of one scrape.
const scrapeTimeout = 5 * time.Second

// CountedStatuses are the statuses threadbox_sessions reports.
var CountedStatuses = []db.SessionStatus{db.SessionCreating, db.SessionActive, db.SessionPausing, db.SessionPaused,
	db.SessionResuming, db.SessionDestroying, db.SessionError}

var sessionsDesc = prometheus.NewDesc(namespace+"_sessions",
	"Sessions by status and provider, read from the database at scrape time (destroyed ones not counted; at most 10000 per status).",
	[]string{"status", "provider"}, nil)

// sessionCollector counts sessions when scraped: the database is the truth every replica shares.
type sessionCollector struct {
	store SessionCounter
	log   *zap.Logger
}

// countedDesc says whether this scrape could count the sessions. A failed count is a series of its
// own, not a failed scrape: a 500 would make every replica look down during a database outage (up ==
// 0, ThreadboxDown) and take every other figure away when it is wanted. The store's error (a host, a
// user, the driver's words) goes to the log only: the response goes to whoever scrapes.
var countedDesc = prometheus.NewDesc(namespace+"_sessions_counted",
	"1 when this scrape could count the sessions in the database, 0 when the database could not be read (see the log).",
	nil, nil)

func (c *sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- countedDesc
}

func (c *sessionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts, err := CountSessions(ctx, c.store)
	if err != nil {
		c.log.Warn("counting sessions for /metrics", zap.Error(err))
		ch <- prometheus.MustNewConstMetric(countedDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(countedDesc, prometheus.GaugeValue, 1)
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n), string(k.Status), k.Provider)
	}
}

// SessionKey is one threadbox_sessions series.
type SessionKey struct {
	Status   db.SessionStatus
	Provider string
}

// CountSessions counts sessions by status and provider, at most MaxCounted per status. The global
// `admin stats` shows the same numbers.
func CountSessions(ctx context.Context, store SessionCounter) (map[SessionKey]int, error) {
	out := map[SessionKey]int{}
	for _, st := range CountedStatuses {
		after, seen := "", 0
		for seen < MaxCounted {
			page, err := store.SessionsByStatus(ctx, st, after, min(db.MaxBatch, MaxCounted-seen))
			if err != nil {
				return nil, fmt.Errorf("counting %s sessions: %w", st, err)
			}
			for _, s := range page {
				out[SessionKey{Status: st, Provider: s.Provider}]++
			}
			seen += len(page)
			if len(page) == 0 || len(page) < min(db.MaxBatch, MaxCounted-seen+len(page)) {
				break
			}
			after = page[len(page)-1].ThreadKey
		}
	}
	return out, nil
}

// Numbers are the figures behind /metrics, for the global `admin stats`: every threadbox_ series
// (histograms as their _count and _sum), gathered from this process's registry.
func (m *Metrics) Numbers(_ context.Context) ([]bot.Stat, error) {
	mfs, err := m.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering metrics: %w", err)
	}
	var out []bot.Stat
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, namespace+"_") {
			continue
		}
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			ls := strings.Join(labels, ",")
			switch {
			case s.Counter != nil:
				out = append(out, bot.Stat{Name: name, Labels: ls, Value: s.GetCounter().GetValue()})
			case s.Gauge != nil:
				out = append(out, bot.Stat{Name: name, Labels: ls, Value: s.GetGauge().GetValue()})
			case s.Histogram != nil:
				out = append(out, bot.Stat{Name: name + "_count", Labels: ls, Value: float64(s.GetHistogram().GetSampleCount())},
					bot.Stat{Name: name + "_sum", Labels: ls, Value: s.GetHistogram().GetSampleSum()})
			}
		}
	}
	return out, nil
}
