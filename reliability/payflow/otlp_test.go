package payflow_test

import (
	"context"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// envOTLP, when set, makes every role export its traces over OTLP/gRPC: to its value
// when that is a host:port, else to 127.0.0.1:4317 (a local Jaeger), each role under
// its own service name (payflow-client, payflow-gateway, payflow-payments,
// payflow-ledger).
const envOTLP = "PAYFLOW_OTLP"

// tracing sets up the role's tracing: nil without envOTLP, else an SDK provider
// exporting over OTLP, made the global one (the toolkit's own spans use it), with the
// W3C trace context as the propagator. stop flushes it.
func tracing(role string) (tp trace.TracerProvider, stop func(), err error) {
	v := os.Getenv(envOTLP)
	if v == "" {
		return nil, func() {}, nil
	}
	endpoint := "127.0.0.1:4317"
	if strings.Contains(v, ":") {
		endpoint = v
	}
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, nil, err
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "payflow-"+role))))
	otel.SetTracerProvider(sdk)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return sdk, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sdk.Shutdown(ctx)
	}, nil
}
