// Package criticality says how much a request is worth when something must be shed.
// A request has one of four levels, after the Google SRE book ("Handling Overload"),
// most important first:
//
//	CriticalPlus   critical_plus    a user waits, and losing it is a loss (checkout)
//	Critical       critical         the default: a user waits for it
//	SheddablePlus  sheddable_plus   batch work that will be retried later
//	Sheddable      sheddable        may fail at any time (prefetch, speculative work)
//
// The level travels with the request like its deadline: it is set once, as near the
// user as possible (deadlinekit.WithCriticality at the edge, or [With] in a handler),
// and every call made while serving the request carries it. Package propagate writes
// it on the wire (the header or metadata deadlinekit-criticality) and reads it on the
// next server from callers it trusts, and only from those: an untrusted caller cannot
// promote itself. A layer that must choose what to refuse reads it with [From].
//
//	ctx = criticality.With(ctx, criticality.Sheddable) // a prefetch
//	resp, err := client.Do(req.WithContext(ctx))        // sent with deadlinekit-criticality: sheddable
//
// A context without a level is Critical, and so is the zero Level: code that never
// heard of criticality serves at the default level, and the default is never
// written on the wire (an absent header means critical), so that callers and
// servers which do not use levels see no new header.
//
// Levels are ordered: a < b means a is shed before b (Sheddable < SheddablePlus <
// Critical < CriticalPlus).
//
// This package imports the standard library only.
package criticality
