// Package retry retries a failed call only where another attempt can succeed, pays
// for every attempt and every wait out of the call's one deadline, and keeps a
// client's retries within a [Budget], so that a blip is absorbed and an outage is not
// turned into a storm.
//
// On the client, [NewTransport] wraps an [net/http.RoundTripper] and
// [UnaryClientInterceptor] serves a gRPC client; without options a call makes at most
// 3 attempts, with [DefaultBackoff] between them. On the server, [NewMiddleware] and
// [UnaryServerInterceptor] keep the retrying to one layer of a chain. Retry is the
// outermost deadlinekit layer of a client (tracing → retry → breaker → hedge →
// propagate → transport): each attempt goes through the layers beneath again, and
// shows as a child span of the call's (package otelattr names its attributes).
//
// The budget reads each call's level (package criticality): a lower level's retries
// stop first, leaving a headroom to the higher levels in use ([Budget]).
package retry
