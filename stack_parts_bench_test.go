package deadlinekit_test

import (
	"net/http"
	"testing"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/internal/pairbench"
)

// BenchmarkStackAgainstFloor pairs the call of [BenchmarkStack] made with the floor of
// every promise ([BenchmarkStackFloor]'s fused-all) on both sides, call by call, with
// the same call made with the stack on one side or both and the floor on the other:
// what the stack costs beyond its floor, and on which side ("client", "server",
// "both"). added-% is of the floor's call; p10-added-% is the same in the fastest
// mode of the call's latency (see pairbench.Run).
//
//	go test -run '^$' -bench StackAgainstFloor -benchtime 20000x -count 3 .
func BenchmarkStackAgainstFloor(b *testing.B) {
	for _, side := range []struct {
		name           string
		client, server bool
	}{{"both", true, true}, {"client", true, false}, {"server", false, true}} {
		b.Run(side.name, func(b *testing.B) {
			untracedAndTraced(b, func(b *testing.B, traced bool) {
				rec := recordNone
				if traced {
					rec = recordSpan
				}
				floorServers := []grpc.UnaryServerInterceptor{floorServerAll}
				floor := startCall(b, []grpc.UnaryClientInterceptor{newFloorAllClient(rec).intercept}, floorServers, traced, 0)
				cis, sis := stackInterceptors(allLayers)
				if !side.client {
					cis = []grpc.UnaryClientInterceptor{newFloorAllClient(rec).intercept}
				}
				if !side.server {
					sis = floorServers
				}
				stack := startCall(b, cis, sis, traced, 0)
				b.ReportAllocs()
				pairbench.Run(b, floor, stack)
			})
		})
	}
}

// BenchmarkStackWithout pairs the client stack of [BenchmarkStack] (retry → hedge →
// propagate, against the floor's server) with the same stack less one layer, call by
// call: added-% and p10-added-% are what that layer costs on a loopback call, where
// [BenchmarkStackCode] says what its code costs in the process.
//
//	go test -run '^$' -bench StackWithout -benchtime 20000x -count 3 .
func BenchmarkStackWithout(b *testing.B) {
	for _, v := range []struct {
		name string
		less layers
	}{
		{"retry", layers{propagate: true, hedge: true}},
		{"hedge", layers{propagate: true, retry: true}},
		{"propagate", layers{retry: true, hedge: true}},
	} {
		b.Run(v.name, func(b *testing.B) {
			untracedAndTraced(b, func(b *testing.B, traced bool) {
				floorServers := []grpc.UnaryServerInterceptor{floorServerAll}
				all, _ := stackInterceptors(allLayers)
				less, _ := stackInterceptors(v.less)
				without, with := startCall(b, less, floorServers, traced, 0), startCall(b, all, floorServers, traced, 0)
				b.ReportAllocs()
				pairbench.Run(b, without, with)
			})
		})
	}
}

// BenchmarkStackWithoutHTTP is [BenchmarkStackWithout] on the call of
// [BenchmarkStackHTTP]: deadlinekit.NewTransport and NewHandler with their defaults,
// paired call by call with the same built Without one layer (on whichever side has
// it), untraced and traced.
//
//	go test -run '^$' -bench StackWithoutHTTP -benchtime 20000x -count 3 .
func BenchmarkStackWithoutHTTP(b *testing.B) {
	for _, l := range []deadlinekit.Layer{deadlinekit.Retry, deadlinekit.Breaker, deadlinekit.Hedge, deadlinekit.Propagate, deadlinekit.ShortCircuit, deadlinekit.Keys} {
		b.Run(l.String(), func(b *testing.B) {
			untracedAndTraced(b, func(b *testing.B, traced bool) {
				stack := func(opts ...deadlinekit.Option) func() error {
					return startHTTPCall(b, func(rt http.RoundTripper) http.RoundTripper { return deadlinekit.NewTransport(rt, opts...) },
						func(h http.Handler) http.Handler { return deadlinekit.NewHandler(h, opts...) }, traced)
				}
				without, with := stack(deadlinekit.Without(l)), stack()
				b.ReportAllocs()
				pairbench.Run(b, without, with)
			})
		})
	}
}
