package record

import (
	"slices"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/deadlinekit/deadlinekit/internal/vocab"
)

// namingMeter notes the name and kind of every instrument made through it.
type namingMeter struct {
	noop.Meter
	made *[]string
}

func (m namingMeter) note(name string, k vocab.Kind) { *m.made = append(*m.made, name+" "+string(k)) }

func (m namingMeter) Int64Counter(name string, o ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	m.note(name, vocab.Counter)
	return m.Meter.Int64Counter(name, o...)
}

func (m namingMeter) Int64UpDownCounter(name string, o ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	m.note(name, vocab.UpDown)
	return m.Meter.Int64UpDownCounter(name, o...)
}

func (m namingMeter) Int64Gauge(name string, o ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	m.note(name, vocab.Gauge)
	return m.Meter.Int64Gauge(name, o...)
}

func (m namingMeter) Float64Histogram(name string, o ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	m.note(name, vocab.Histogram)
	return m.Meter.Float64Histogram(name, o...)
}

type namingProvider struct {
	noop.MeterProvider
	made *[]string
}

func (p namingProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return namingMeter{made: p.made}
}

// TestInstrumentsAreTheVocabulary: the package makes exactly the metrics of the
// vocabulary's table, each of its kind.
func TestInstrumentsAreTheVocabulary(t *testing.T) {
	var made []string
	p := namingProvider{made: &made}
	newInstruments(p)
	newDedupInstruments(p)
	newHedgeOutcomes(p)
	var want []string
	for _, m := range vocab.Metrics {
		want = append(want, m.Name+" "+string(m.Kind))
	}
	slices.Sort(made)
	slices.Sort(want)
	if !slices.Equal(made, want) {
		t.Errorf("instruments made:\n%q\nthe vocabulary's metrics:\n%q", made, want)
	}
}
