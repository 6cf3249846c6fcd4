package main

import (
	"context"
	"errors"
	"net/http"
	"os"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

// Service names as they appear in Jaeger.
const (
	svcClient = "threehop-client"
	svcA      = "threehop-a"
	svcB      = "threehop-b"
	svcC      = "threehop-c"
)

// telemetry gives each of the four services its own TracerProvider (so each shows
// as its own service in Jaeger), exporting over OTLP/gRPC. Disabled, every provider
// is a no-op and the toolkit records nothing.
type telemetry struct {
	providers map[string]*sdktrace.TracerProvider
}

// newTelemetry exports to endpoint (host:port, plain text) when it is not empty, else
// to OTEL_EXPORTER_OTLP_ENDPOINT when that is set; with neither, tracing is off.
func newTelemetry(ctx context.Context, endpoint string) (*telemetry, error) {
	if endpoint == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return &telemetry{}, nil
	}
	// The toolkit injects the trace context of each attempt with the global
	// propagator, as otelhttp does.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t := &telemetry{providers: map[string]*sdktrace.TracerProvider{}}
	for _, name := range []string{svcClient, svcA, svcB, svcC} {
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, errors.Join(err, t.shutdown(ctx))
		}
		t.providers[name] = sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(exp),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", name))),
		)
	}
	return t, nil
}

func (t *telemetry) enabled() bool { return t.providers != nil }

func (t *telemetry) provider(service string) trace.TracerProvider {
	if tp, ok := t.providers[service]; ok {
		return tp
	}
	return noop.NewTracerProvider()
}

// shutdown flushes every provider's spans to the exporter.
func (t *telemetry) shutdown(ctx context.Context) error {
	var errs []error
	for _, tp := range t.providers {
		errs = append(errs, tp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// serverHandler wraps a service's HTTP handler with otelhttp, outermost, as a user
// would: the toolkit's middleware then records on otelhttp's server span.
func (t *telemetry) serverHandler(service string, h http.Handler) http.Handler {
	if !t.enabled() {
		return h
	}
	return otelhttp.NewHandler(h, service, otelhttp.WithTracerProvider(t.provider(service)))
}

// transport wraps a service's outbound HTTP transport with otelhttp, outermost.
func (t *telemetry) transport(service string, rt http.RoundTripper) http.RoundTripper {
	if !t.enabled() {
		return rt
	}
	return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(t.provider(service)))
}

// grpcServerOptions and grpcDialOptions install otelgrpc's stats handlers.
func (t *telemetry) grpcServerOptions(service string) []grpc.ServerOption {
	if !t.enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(t.provider(service))))}
}

func (t *telemetry) grpcDialOptions(service string) []grpc.DialOption {
	if !t.enabled() {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(t.provider(service))))}
}

// root starts the span that a user request's trace hangs from, on the client.
func (t *telemetry) root(ctx context.Context, name string) (context.Context, trace.Span) {
	return t.provider(svcClient).Tracer("threehop").Start(ctx, name)
}

// watch adds sp to service's provider, to read its spans as they end; the function it
// returns takes it away. Without tracing it does nothing.
func (t *telemetry) watch(service string, sp sdktrace.SpanProcessor) (stop func()) {
	tp, ok := t.providers[service]
	if !ok {
		return func() {}
	}
	tp.RegisterSpanProcessor(sp)
	return func() { tp.UnregisterSpanProcessor(sp) }
}
