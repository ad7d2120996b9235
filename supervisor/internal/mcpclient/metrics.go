package mcpclient

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the MCP servers' series, by server: how many sessions run,
// how starts went, and how long calls took (their outcomes are the broker's
// cyberos_tool_calls_total under tool mcp__<server>__<tool>).
type Metrics struct {
	Running      *prometheus.GaugeVec     // cyberos_mcp_servers_running{server}
	Starts       *prometheus.CounterVec   // cyberos_mcp_server_starts_total{server,result}
	CallDuration *prometheus.HistogramVec // cyberos_mcp_call_duration_seconds{server}
	// EgressRefused counts the requests a server's egress proxy, or the
	// dialler of a remote server, refused.
	EgressRefused *prometheus.CounterVec // cyberos_mcp_egress_refused_total{server,reason}
}

// Start results, the result label of cyberos_mcp_server_starts_total: a
// session ready (initialized, tools listed), or a start that failed.
const (
	StartOK     = "ok"
	StartFailed = "failed"
)

// NewMetrics registers the MCP series on r.
func NewMetrics(r prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cyberos_mcp_servers_running", Help: "MCP server sessions running now (each stdio server in a sandbox of its own), by server.",
		}, []string{"server"}),
		Starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyberos_mcp_server_starts_total", Help: "MCP server starts by result (ok: initialized and tools listed; failed); restarts after a crash count again.",
		}, []string{"server", "result"}),
		CallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cyberos_mcp_call_duration_seconds", Help: "MCP tools/call latency as the broker sees it, by server.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60},
		}, []string{"server"}),
		EgressRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyberos_mcp_egress_refused_total", Help: "Requests of an MCP server (through its egress proxy) or to a remote one that the egress filter refused, by server and reason.",
		}, []string{"server", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.Running, m.Starts, m.CallDuration, m.EgressRefused} {
		if err := r.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) started(server string, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.Starts.WithLabelValues(server, StartFailed).Inc()
		return
	}
	m.Starts.WithLabelValues(server, StartOK).Inc()
	m.Running.WithLabelValues(server).Inc()
}

func (m *Metrics) ended(server string) {
	if m != nil {
		m.Running.WithLabelValues(server).Dec()
	}
}

func (m *Metrics) call(server string, d time.Duration) {
	if m != nil {
		m.CallDuration.WithLabelValues(server).Observe(d.Seconds())
	}
}

func (m *Metrics) egressRefused(server, reason string) {
	if m != nil {
		m.EgressRefused.WithLabelValues(server, reason).Inc()
	}
}
