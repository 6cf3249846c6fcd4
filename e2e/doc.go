// Package e2e holds the end-to-end test of deadlinekit against a real Jaeger: it runs
// examples/threehop with OTLP export and reads the traces back through Jaeger's query
// API. It is built only with the e2e tag, so that go test ./... needs no Jaeger, and
// it fails, never skips, when no Jaeger answers on 127.0.0.1:16686. .ci/run starts
// Jaeger and runs it:
//
//	scripts/jaeger.sh start && go test -tags e2e -count=1 ./e2e -v
package e2e
