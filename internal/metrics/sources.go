package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Source is one metric family read when Prometheus scrapes: Read emits one
// value per value of Label (Label empty: one value, label ignored).
type Source struct {
	Name  string // without the namespace
	Help  string
	Type  prometheus.ValueType
	Label string
	Read  func(emit func(label string, v float64))
}

// Add registers scrape-time sources.
func (m *Metrics) Add(sources ...Source) error {
	for _, s := range sources {
		var labels []string
		if s.Label != "" {
			labels = []string{s.Label}
		}
		if err := m.reg.Register(&sourceCollector{s: s, desc: Desc(s.Name, s.Help, labels...)}); err != nil {
			return err
		}
	}
	return nil
}

// Desc describes a family of the service (Namespace prefixed).
func Desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

type sourceCollector struct {
	s    Source
	desc *prometheus.Desc
}

func (c *sourceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.Read(func(label string, v float64) {
		var labels []string
		if c.s.Label != "" {
			labels = []string{label}
		}
		m, err := prometheus.NewConstMetric(c.desc, c.s.Type, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(c.desc, err)
		}
		ch <- m
	})
}
