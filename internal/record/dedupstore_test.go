package record

import (
	"context"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/metrictest"
	"github.com/deadlinekit/deadlinekit/otelattr"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestDedupStoreEnabled: a store call is worth timing only where
// deadlinekit.dedup.store.duration measures; with a meter provider that does, it
// measures what DedupStore records.
func TestDedupStoreEnabled(t *testing.T) {
	ctx := context.Background()
	if DedupStoreEnabled(ctx) {
		t.Error("enabled without a meter provider")
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	set := newDedupInstruments(mp)
	old := dedupInstruments
	dedupInstruments = func() *dedupInstrumentSet { return set }
	defer func() { dedupInstruments = old }()
	if !DedupStoreEnabled(ctx) {
		t.Fatal("not enabled with a meter provider")
	}
	DedupStore(ctx, "acquire", 3*time.Millisecond)
	p := metrictest.Points(t, reader, "deadlinekit.dedup.store.duration", otelattr.DedupStoreOpKey.String("acquire"))
	if len(p) != 1 || p[0].Count != 1 {
		t.Errorf("points %+v; want one of count 1", p)
	}
}
