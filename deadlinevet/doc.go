// Package deadlinevet is a go/analysis pass, [Analyzer], that finds lost
// deadlines: places where code holds its caller's context yet sends work on
// without the caller's deadline. Nothing at run time can see that a deadline was
// lost (the downstream call simply has none, or a fresh one); only the code can.
//
// # Checks
//
// A context is "at hand" in a function with a named context.Context parameter, an
// *http.Request (r.Context()) or a gRPC server stream (stream.Context()), and in
// the function literals and goroutines it starts, unless a literal has a context
// parameter of its own (then that one is at hand), or the function returns or
// stores the literal (it runs later, when the context may be gone). A context
// parameter named _ or left unnamed says the function uses none: nothing is at
// hand there. main, init and Test functions have none either.
//
// Each check reports under a category of its name and has a flag of its name:
//
//   - newroot (off by default): context.Background() or context.TODO() where a
//     context is at hand. Fix: use it (in a goroutine, also: context.WithoutCancel
//     of it).
//   - detached: a context cut from its caller (context.WithoutCancel, or a new
//     root when newroot is off) that reaches an outbound call:
//     http.NewRequestWithContext, (*http.Request).WithContext and Clone,
//     grpc.ClientConnInterface's Invoke and NewStream, generated gRPC clients
//     (a method taking ...grpc.CallOption), connect clients. A context given a
//     deadline again (context.WithTimeout, WithDeadline) is not reported.
//   - noctx: an outbound call without the context at hand: http.Get, Head, Post,
//     PostForm and the *http.Client methods of those names, http.NewRequest,
//     net.Dial and (*net.Dialer).Dial, database/sql's Query, QueryRow, Exec,
//     Prepare, Ping and Begin. Fix where the ...Context variant is a rename. A
//     request from http.NewRequest is reported only when the same function sends
//     it as it is (Do, RoundTrip): one returned, handed on or given a context
//     later (req.WithContext) may travel with one.
//   - retryloop: a hand-written loop that calls a client and goes round again on
//     its error, where the client already retries: it was built (in the same
//     package) with deadlinekit.NewTransport or DialOptions, connectkit.ClientOption
//     (unless given deadlinekit.Without(deadlinekit.Retry)), retry.NewTransport,
//     retry.UnaryClientInterceptor, connectkit.Retry, or a gRPC service config with
//     a "retryPolicy". Three layers of three attempts are 27 calls.
//   - sleep (off by default): time.Sleep where a context is at hand: it sleeps on after the caller
//     has gone. Fix: a select on ctx.Done() and time.After, returning ctx.Err()
//     where the results allow it. Not reported in _test.go files, where a fake
//     server that sleeps through its caller plays a slow peer on purpose.
//
// detached, noctx and retryloop are on by default; newroot and sleep are off,
// for their false positives on public code exceeded 10% of their findings
// (EVALUATION.md has the figures: a sleep is most often a deliberate delay in an
// example, a new root a request cloned only to be matched). Turn a check on or
// off with its flag: deadlinevet -newroot -sleep ./... runs all five, and
// deadlinevet -retryloop=false ./... drops one.
//
// Files with the standard "// Code generated ... DO NOT EDIT." header are skipped.
//
// # Accepting deliberate detachment
//
// Work that must outlive its request (an audit record written after the answer,
// a cache fill shared by every caller) says so with a directive and a reason:
//
//	//deadlinevet:detached the audit record is written even when the caller has gone
//	go func() {
//		audit(context.WithoutCancel(ctx), rec)
//	}()
//
// A directive at the end of a line covers that line's statement; one on a line of
// its own covers the statement below it, all of it (above a go statement: the
// whole goroutine). It accepts newroot, detached, noctx and sleep findings. A
// directive without a reason, misspelt, or written "// deadlinevet:" is itself
// reported (category "directive").
//
// # Running it
//
// Alone, with the flags above (go install
// github.com/deadlinekit/deadlinekit/deadlinevet/cmd/deadlinevet@latest):
//
//	deadlinevet ./...
//	deadlinevet -fix ./...            # apply the suggested fixes
//
// Under go vet, which passes the same flags on:
//
//	go vet -vettool=$(command -v deadlinevet) ./...
//	go vet -vettool=$(command -v deadlinevet) -sleep=false ./...
//
// From golangci-lint v2, through its module plugin system: package
// [github.com/deadlinekit/deadlinekit/deadlinevet/gclplugin] registers the plugin
// (register.Plugin) under the name deadlinevet, its settings the checks' names:
//
//	# .custom-gcl.yml: golangci-lint custom builds ./custom-gcl with the plugin
//	version: v2.8.0
//	plugins:
//	  - module: github.com/deadlinekit/deadlinekit/deadlinevet
//	    import: github.com/deadlinekit/deadlinekit/deadlinevet/gclplugin
//	    version: vX.Y.Z # the version of this module you use
//	    # or, from a checkout: path: ./path/to/deadlinekit/deadlinevet
//
//	# .golangci.yml
//	version: "2"
//	linters:
//	  enable:
//	    - deadlinevet
//	  settings:
//	    custom:
//	      deadlinevet:
//	        type: module
//	        description: finds lost deadlines
//	        settings:
//	          newroot: true
//
// In an editor: gopls runs the analyzers built into it (go vet's suite among
// them) and cannot load others yet (go.dev/issue/59869), so deadlinevet reaches
// the editor beside gopls, as a lint tool: in VS Code, "go.lintTool":
// "golangci-lint" with "go.alternateTools" pointing at the custom binary above
// (its findings appear as diagnostics on save); any editor that runs go vet can
// give it -vettool. Apply the suggested fixes with deadlinevet -fix.
//
// # Limits
//
// The analysis is one package and one function at a time: a detached context
// handed to a function that makes the outbound call, or a client that retries
// built in another package, is not seen.
package deadlinevet
