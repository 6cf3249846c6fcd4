// Command quickstart is the README's quick start as a program: an HTTP service
// (front) calling a gRPC service (prices) calling an HTTP service (stock), each wired
// with one deadlinekit constructor per side, traced with otelhttp and otelgrpc.
//
//	go run ./examples/quickstart                         # prints what each request met
//	go run ./examples/quickstart -otlp 127.0.0.1:4317    # and exports the traces
//
// It sends three requests: one with a comfortable budget, one while stock fails
// twice, and one with a budget below stock's floor.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

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
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/deadline"
)

func main() {
	otlp := flag.String("otlp", "", "export traces over OTLP/gRPC to this host:port")
	flag.Parse()
	if err := run(*otlp); err != nil {
		log.Fatal(err)
	}
}

// failures is how many of stock's next answers are 503s.
var failures atomic.Int32

func run(otlp string) error {
	ctx := context.Background()
	tracing, stop, err := providers(ctx, otlp, "quickstart-front", "quickstart-prices", "quickstart-stock")
	if err != nil {
		return err
	}
	defer stop()
	front, prices, stock := tracing[0], tracing[1], tracing[2]

	// stock: HTTP.
	stockMux := http.NewServeMux()
	stockMux.HandleFunc("/stock", func(w http.ResponseWriter, r *http.Request) {
		left, _ := deadline.Remaining(r.Context())
		if failures.Add(-1) >= 0 {
			http.Error(w, "stock: warming up", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "42 in stock (stock had %s left)", deadline.Format(left))
	})
	stockURL, err := serve(otelhttp.NewHandler(deadlinekit.NewHandler(stockMux, deadlinekit.WithFloor(50*time.Millisecond)), "stock", otelhttp.WithTracerProvider(stock)))
	if err != nil {
		return err
	}

	// prices: gRPC, calls stock over HTTP.
	toStock := &http.Client{Transport: otelhttp.NewTransport(deadlinekit.NewTransport(nil), otelhttp.WithTracerProvider(prices))}
	gs := grpc.NewServer(append(deadlinekit.ServerOptions(), grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(prices))))...)
	gs.RegisterService(&priceService, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, stockURL+"/stock", nil)
		if err != nil {
			return err
		}
		resp, err := toStock.Do(req)
		if err := deadlinekit.FromHTTP(resp, err); err != nil {
			return deadlinekit.GRPCError(ctx, err)
		}
		resp.Body.Close()
		return nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go gs.Serve(lis)
	defer gs.Stop()

	// front: HTTP, calls prices over gRPC.
	conn, err := grpc.NewClient(lis.Addr().String(), append(deadlinekit.DialOptions(deadlinekit.WithIdempotentMethods(priceMethod)),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(front))),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	frontMux := http.NewServeMux()
	frontMux.HandleFunc("/price", func(w http.ResponseWriter, r *http.Request) {
		err := deadlinekit.FromGRPC(conn.Invoke(r.Context(), priceMethod, new(emptypb.Empty), new(emptypb.Empty)), nil)
		if err != nil {
			deadlinekit.WriteHTTPError(w, err)
			return
		}
		io.WriteString(w, "price: 9.99\n")
	})
	frontURL, err := serve(otelhttp.NewHandler(deadlinekit.NewHandler(frontMux), "front", otelhttp.WithTracerProvider(front)))
	if err != nil {
		return err
	}

	// The user: an HTTP client with a budget per request.
	user := &http.Client{Transport: otelhttp.NewTransport(deadlinekit.NewTransport(nil), otelhttp.WithTracerProvider(front))}
	for _, r := range []struct {
		name     string
		budget   time.Duration
		failures int32
	}{
		{"a comfortable budget", time.Second, 0},
		{"stock fails twice", time.Second, 2},
		{"a budget below stock's 50 ms floor", 60 * time.Millisecond, 0},
	} {
		failures.Store(r.failures)
		ctx, span := front.Tracer("quickstart").Start(ctx, "user: "+r.name)
		status, body, err := get(ctx, user, frontURL+"/price", r.budget)
		span.End()
		if err != nil {
			return err
		}
		fmt.Printf("%-36s %s  %s\n", r.name+":", status, strings.TrimSpace(body))
		if id := span.SpanContext().TraceID(); id.IsValid() {
			fmt.Printf("trace %s  %s\n", id, r.name)
		}
	}
	return nil
}

func get(ctx context.Context, c *http.Client, url string, budget time.Duration) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.Status, string(b), err
}

// priceMethod is prices' one method, registered by hand so that the example needs no
// generated code: google.protobuf.Empty in and out.
const priceMethod = "/quickstart.Prices/Get"

var priceService = grpc.ServiceDesc{
	ServiceName: "quickstart.Prices",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Get",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) {
				return new(emptypb.Empty), srv.(func(context.Context) error)(ctx)
			}
			if icpt == nil {
				return h(ctx, nil)
			}
			return icpt(ctx, nil, &grpc.UnaryServerInfo{Server: srv, FullMethod: priceMethod}, h)
		},
	}},
}

func serve(h http.Handler) (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go http.Serve(lis, h)
	return "http://" + lis.Addr().String(), nil
}

// providers returns one TracerProvider per service (so that each shows as its own
// service in Jaeger), exporting to otlp; no-ops when otlp is empty.
func providers(ctx context.Context, otlp string, names ...string) ([]trace.TracerProvider, func(), error) {
	tps := make([]trace.TracerProvider, len(names))
	if otlp == "" {
		for i := range tps {
			tps[i] = noop.NewTracerProvider()
		}
		return tps, func() {}, nil
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	var sdks []*sdktrace.TracerProvider
	stop := func() {
		for _, tp := range sdks {
			_ = tp.Shutdown(context.Background())
		}
	}
	for i, name := range names {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(otlp), otlptracegrpc.WithInsecure())
		if err != nil {
			stop()
			return nil, nil, err
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", name))))
		sdks = append(sdks, tp)
		tps[i] = tp
	}
	return tps, stop, nil
}
