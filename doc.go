// Package deadlinekit makes one request's time budget travel with it through every hop
// of a service chain, and spends that budget wisely.
//
// The module is a set of small packages, one concern each, that compose as middleware
// and interceptors. This root package holds no code; it documents how the pieces fit.
//
//   - [github.com/deadlinekit/deadlinekit/deadline]: budget arithmetic on a context —
//     time left, the budget to hand to the next hop (reserve, per-hop cap, floor,
//     default), per-attempt timeouts. Standard library only.
//   - [github.com/deadlinekit/deadlinekit/propagate]: carries the deadline on the wire
//     (grpc-timeout over gRPC and HTTP; Connect-Timeout-Ms and Envoy's header
//     understood) with an HTTP transport and middleware and gRPC interceptors.
//
// Packages shortcircuit (refuse work the budget cannot pay for), hedge (backup
// requests after the observed P99, extra load capped), retry (only what can succeed,
// inside the same deadline, under a budget) and otelattr (attempts and budgets as
// OpenTelemetry attributes) follow the same shapes.
//
// # Server side, outermost first
//
//	user's tracing (otelhttp / otelgrpc)
//	  → propagate: read the inbound deadline, clamp it, set it on the context
//	  → shortcircuit: refuse when the budget left is below the floor
//	  → handler
//
// For HTTP:
//
//	handler = propagate.NewMiddleware()(mux)
//
// For gRPC:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(propagate.UnaryServerInterceptor()))
//
// # Client side, outermost first
//
//	user's tracing → retry → hedge → propagate (writes the budget left when each
//	attempt is sent, minus the reserve) → transport
//
// For HTTP:
//
//	client := &http.Client{Transport: propagate.NewTransport(nil)}
//
// For gRPC:
//
//	grpc.NewClient(target, grpc.WithChainUnaryInterceptor(propagate.UnaryClientInterceptor()), ...)
//
// Every package's adapters have the same names: NewTransport and NewMiddleware for
// HTTP, UnaryClientInterceptor, StreamClientInterceptor, UnaryServerInterceptor and
// StreamServerInterceptor for gRPC, each configured with WithX options whose defaults
// work without any.
//
// The runnable demonstration is examples/threehop: go run ./examples/threehop.
package deadlinekit
