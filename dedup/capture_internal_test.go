package dedup

import (
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// doneStream is a server transport stream as grpc-go's is once it is done (the
// caller reset it): it refuses header and trailer metadata.
type doneStream struct{ grpc.ServerTransportStream }

var errDone = errors.New("transport: the stream is done")

func (doneStream) SetHeader(metadata.MD) error  { return errDone }
func (doneStream) SendHeader(metadata.MD) error { return errDone }
func (doneStream) SetTrailer(metadata.MD) error { return errDone }

// grpc-go marks a stream done before it cancels the stream's context
// (http2Server.closeStream): metadata a handler sets in between is refused while
// the call's context has not ended yet. That refusal is the caller's absence too,
// not the answer's: the header and trailer are kept, so that a repeat's replay
// carries them (seen in TestHistory/redis under -race: a replay with the answer's
// body and none of its metadata).
func TestCaptureKeepsMetadataOfAStreamDoneBeforeItsContext(t *testing.T) {
	cs := &captureStream{ServerTransportStream: doneStream{}}
	if err := cs.SetHeader(metadata.Pairs("x-app-exec", "7")); err == nil {
		t.Fatal("SetHeader on a done stream succeeded")
	}
	_ = cs.SetTrailer(metadata.Pairs("x-app-trailer", "t-7"))
	header, trailer := cs.seal()
	if len(header.Get("x-app-exec")) == 0 || len(trailer.Get("x-app-trailer")) == 0 {
		t.Fatalf("kept header %v, trailer %v; want the handler's", header, trailer)
	}
}

// A header set after the handler sent one is refused for the answer's sake (the
// caller never gets it), caller there or not: it is not kept.
func TestCaptureDropsAHeaderSetAfterTheHeaderWent(t *testing.T) {
	cs := &captureStream{ServerTransportStream: doneStream{}, headerSent: true}
	_ = cs.SetHeader(metadata.Pairs("x-late", "1"))
	if header, _ := cs.seal(); header != nil {
		t.Fatalf("kept %v, a header set after the header went", header)
	}
}
