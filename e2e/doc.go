// Package e2e holds the end-to-end test of deadlinekit against a real Jaeger: it runs
// examples/threehop with OTLP export and reads the traces back through Jaeger's query
// API. Start Jaeger first (scripts/jaeger.sh start); .ci/run does. Outside CI the test
// is skipped when no Jaeger answers on 127.0.0.1:16686; with CI=true it never is.
//
//	scripts/jaeger.sh start && go test ./e2e -v
package e2e
