package propagate

import (
	"context"
	"net/http"
	"strconv"

	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// HeaderCriticality carries the request's level (package criticality) between
// services: the HTTP header, and in lower case the gRPC metadata key. A client
// writes the level of the context it sends under, on every attempt, and nothing
// for the default level (critical), which is what an absent header means; a server
// reads it from callers it trusts ([WithTrustHTTP], [WithTrustGRPC]).
const HeaderCriticality = criticality.Header

// Why the default level is not written: most traffic is critical, and an absent
// header means critical on every server, so that writing it would cost every call
// a header (and a metadata copy) to say nothing, and would show a header to
// servers that never use levels. The client still removes a level header it
// would not send (a handler forwarding its caller's headers or metadata after
// lowering its own level), so that what goes out is always the context's level.

// inboundLevel puts on ctx the level in vs, the values of the level header a
// trusted caller sent (none: ctx as it is, critical unless a layer outside set
// one), and records it on the server span. Two values, or one that does not parse,
// are a *criticality.ParseError, unless [WithIgnoreMalformed] says to treat the
// header as absent.
func (c *config) inboundLevel(ctx context.Context, vs []string) (context.Context, error) {
	if len(vs) == 0 {
		return ctx, nil
	}
	var l criticality.Level
	var err error
	if len(vs) > 1 {
		err = criticality.Malformed(vs[0], "header repeated "+strconv.Itoa(len(vs))+" times")
	} else {
		l, err = criticality.Parse(vs[0])
	}
	if err != nil {
		if c.ignoreMalformed {
			return ctx, nil
		}
		return ctx, err
	}
	record.Criticality(ctx, l)
	return criticality.With(ctx, l), nil
}

// levelValue is the value of the level header for a call made under ctx: "" for
// the default level, which is not written.
func levelValue(ctx context.Context) string {
	if l := criticality.From(ctx); l != criticality.Critical {
		return l.String()
	}
	return ""
}

// levelChange reports the value the level header of h, a request sent under ctx,
// must have ("": none), and whether h has another.
func levelChange(ctx context.Context, h http.Header) (string, bool) {
	v := levelValue(ctx)
	have := h[HeaderCriticality]
	if v == "" {
		return "", len(have) > 0
	}
	return v, len(have) != 1 || have[0] != v
}

// setLevel makes h carry v as its level header ("": none).
func setLevel(h http.Header, v string) {
	if v == "" {
		delete(h, HeaderCriticality)
		return
	}
	h[HeaderCriticality] = []string{v}
}

// withLevelMetadata returns ctx whose outgoing metadata carries exactly ctx's
// level: the level's value, or no value for the default level. ctx itself when it
// does already.
func withLevelMetadata(ctx context.Context) context.Context {
	const key = criticality.MetadataKey
	v := levelValue(ctx)
	have := metadata.ValueFromOutgoingContext(ctx, key)
	switch {
	case v == "" && len(have) == 0, len(have) == 1 && have[0] == v:
		return ctx
	case len(have) == 0:
		return metadata.AppendToOutgoingContext(ctx, key, v)
	}
	md, _ := metadata.FromOutgoingContext(ctx) // a copy
	if v == "" {
		delete(md, key)
	} else {
		md.Set(key, v)
	}
	return metadata.NewOutgoingContext(ctx, md)
}
