// Package docscheck is test-only: its test reads README.md and docs/*.md, extracts
// every ```go block, and type-checks them all with one `go vet` inside the module,
// so that a block that stops compiling fails `go test ./...`.
//
// A block that starts with "package" is a whole file, built as it is. Any other
// block is a fragment: the body of a function. The function's signature is the
// HTML comment on the line above the block, which a rendered page does not show:
//
//	<!-- go: func(ctx context.Context, mux *http.ServeMux) (any, error) -->
//
// (default: func()). The free names of a fragment are that signature's parameters;
// the imports are found from the package names it uses (the table in the test,
// knownImports), and a name the fragment declares but does not use is used for it.
// Errors point at the Markdown file and line of the block.
//
// It also checks that every relative link of those pages names a file and every
// #anchor a heading, and holds a guide's facts that it found no other test
// pinning: docs/overload.md's answer to a full queue (503 over HTTP,
// ResourceExhausted with RetryInfo over gRPC, both saying the handler did not run).
package docscheck
