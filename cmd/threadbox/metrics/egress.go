package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// EgressCounter counts the egress proxy's requests by result (allowed, refused_host,
// refused_address, refused_limit, failed): threadbox_egress_requests_total. It implements egress.Metrics.
type EgressCounter struct{ c *prometheus.CounterVec }

// Egress implements egress.Metrics.
func (e EgressCounter) Egress(result string) { e.c.WithLabelValues(result).Inc() }

// EgressCounter registers the egress series on first use (only restricted egress serves it) and
// returns the counter; later calls return the same one.
func (m *Metrics) EgressCounter() EgressCounter {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "egress_requests_total",
		Help: "Requests and tunnels through the restricted-egress proxy, by result (allowed, refused_host, refused_address, refused_limit, failed)."},
		[]string{"result"})
	if err := m.reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return EgressCounter{c: are.ExistingCollector.(*prometheus.CounterVec)}
		}
		panic(err) // a name clash within this package: a programming error
	}
	return EgressCounter{c: c}
}
