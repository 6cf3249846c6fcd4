package record

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/deadlinekit/deadlinekit/internal/vocab"
)

// The instruments are made from the vocabulary's table: its name, unit and
// description. Errors from instrument creation are reported to the OTel error
// handler by the SDK and leave a usable no-op instrument behind.

func counter(m metric.Meter, name string) metric.Int64Counter {
	v := lookup(name, vocab.Counter)
	i, _ := m.Int64Counter(v.Name, metric.WithUnit(v.Unit), metric.WithDescription(v.Description))
	return i
}

func upDown(m metric.Meter, name string) metric.Int64UpDownCounter {
	v := lookup(name, vocab.UpDown)
	i, _ := m.Int64UpDownCounter(v.Name, metric.WithUnit(v.Unit), metric.WithDescription(v.Description))
	return i
}

func gauge(m metric.Meter, name string) metric.Int64Gauge {
	v := lookup(name, vocab.Gauge)
	i, _ := m.Int64Gauge(v.Name, metric.WithUnit(v.Unit), metric.WithDescription(v.Description))
	return i
}

func histogram(m metric.Meter, name string) metric.Float64Histogram {
	v := lookup(name, vocab.Histogram)
	i, _ := m.Float64Histogram(v.Name, metric.WithUnit(v.Unit), metric.WithDescription(v.Description))
	return i
}

// values are the values the vocabulary lists for k.
func values(k attribute.Key) []string {
	a, _ := vocab.Find(k)
	return a.Values
}

// lookup returns the table's metric named name, which must be of kind k.
func lookup(name string, k vocab.Kind) vocab.Metric {
	v := vocab.Lookup(name)
	if v.Kind != k {
		panic("record: " + name + " is a " + string(v.Kind) + " in the vocabulary, not a " + string(k))
	}
	return v
}
