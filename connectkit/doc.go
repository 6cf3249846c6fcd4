// Package connectkit is deadlinekit for connect-go (connectrpc.com/connect): each
// layer as a connect.Interceptor, and the whole stack in one option for a connect
// client ([ClientOption]) and one for a connect handler ([HandlerOption]), for all
// three protocols connect-go speaks (Connect, gRPC, gRPC-Web).
//
//	client := pingv1connect.NewPingServiceClient(http.DefaultClient, url, connectkit.ClientOption())
//	mux.Handle(pingv1connect.NewPingServiceHandler(svc, connectkit.HandlerOption()))
//
// The layers behave as their gRPC interceptors do, with the same options and
// defaults: connect-go writes and reads the deadline (Connect-Timeout-Ms,
// grpc-timeout), connect codes are classified as the gRPC codes they equal, and a
// procedure is idempotent when its Spec says so (NO_SIDE_EFFECTS, IDEMPOTENT) or the
// proto registry does. It is a package of its own so that a program that does not
// use connect-go does not compile it.
package connectkit
