// Package connectkit is deadlinekit for connect-go (connectrpc.com/connect): each
// layer as a connect.Interceptor, for all three protocols connect-go speaks (Connect,
// gRPC, gRPC-Web). So far: [Propagate] and [ShortCircuit].
//
//	client := pingv1connect.NewPingServiceClient(http.DefaultClient, url,
//		connect.WithInterceptors(connectkit.Propagate()))
//	mux.Handle(pingv1connect.NewPingServiceHandler(svc,
//		connect.WithInterceptors(connectkit.Propagate(), connectkit.ShortCircuit())))
//
// The layers behave as their gRPC interceptors do, with the same options and
// defaults: connect-go writes and reads the deadline (Connect-Timeout-Ms,
// grpc-timeout), connect codes are classified as the gRPC codes they equal, and a
// procedure is idempotent when its Spec says so (NO_SIDE_EFFECTS, IDEMPOTENT) or the
// proto registry does. It is a package of its own so that a program that does not
// use connect-go does not compile it.
package connectkit
