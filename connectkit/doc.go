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
//
// Two rules hold for every layer. Every refusal, at any layer, for a unary call or a
// stream, ends every span and context that the layers beneath it started, and sends
// nothing: a stream refused by propagate's floor or by an open breaker makes no
// request, and its call span and derived context end with the refusal. No pooled or
// reused object crosses a layer boundary while the call may still run.
package connectkit
