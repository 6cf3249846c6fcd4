//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

const (
	jaegerQuery = "http://127.0.0.1:16686"
	jaegerOTLP  = "127.0.0.1:4317"
)

// jaegerTrace is the part of Jaeger's /api/traces/{id} answer the test reads.
type jaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []jaegerSpan             `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
}

type jaegerSpan struct {
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	ProcessID     string      `json:"processID"`
	StartTime     int64       `json:"startTime"`
	Duration      int64       `json:"duration"`
	Tags          []jaegerTag `json:"tags"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
}

type jaegerTag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

type jaegerProcess struct {
	ServiceName string `json:"serviceName"`
}

func (s jaegerSpan) tag(key string) (any, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return t.Value, true
		}
	}
	return nil, false
}

func (s jaegerSpan) float(t *testing.T, key string) float64 {
	t.Helper()
	v, ok := s.tag(key)
	f, isNum := v.(float64)
	if !ok || !isNum {
		t.Fatalf("span %q has no numeric %s (tags %v)", s.OperationName, key, s.Tags)
	}
	return f
}

func (tr jaegerTrace) service(s jaegerSpan) string { return tr.Processes[s.ProcessID].ServiceName }

// spansWith returns the spans of service that carry key, in start order.
func (tr jaegerTrace) spansWith(service, key string) []jaegerSpan {
	var out []jaegerSpan
	for _, s := range tr.Spans {
		if _, ok := s.tag(key); ok && tr.service(s) == service {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartTime < out[j].StartTime })
	return out
}

func jaegerReachable() bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(jaegerQuery + "/api/services")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// runDemo builds and runs examples/threehop with OTLP export and returns the trace IDs
// it printed, by label.
func runDemo(t *testing.T, args ...string) map[string]string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "threehop")
	build := exec.Command("go", "build", "-o", bin, "../examples/threehop")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building threehop: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-otlp", jaegerOTLP}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("threehop: %v\n%s", err, out)
	}
	t.Logf("threehop output:\n%s", out)
	traces := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "  trace <id>  <label>"
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "trace "); ok {
			if id, label, ok := strings.Cut(rest, "  "); ok {
				traces[label] = id
			}
		}
	}
	return traces
}

// fetchTrace reads a trace from Jaeger, waiting for its spans to be ingested until it
// has at least minSpans.
func fetchTrace(t *testing.T, id string, minSpans int) jaegerTrace {
	t.Helper()
	return fetchTraceUntil(t, id, fmt.Sprintf("%d spans", minSpans), func(tr jaegerTrace) bool { return len(tr.Spans) >= minSpans })
}

// fetchTraceUntil reads trace id from Jaeger until ready says it is complete (what,
// for the failure's message): the services export their spans each on its own, in
// no order, so a count of spans alone may be reached before the one the test reads.
func fetchTraceUntil(t *testing.T, id, what string, ready func(jaegerTrace) bool) jaegerTrace {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for {
		resp, err := http.Get(jaegerQuery + "/api/traces/" + id)
		if err == nil {
			var body struct {
				Data []jaegerTrace `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err == nil && len(body.Data) == 1 && ready(body.Data[0]) {
				return body.Data[0]
			}
			if err == nil && len(body.Data) == 1 {
				last = fmt.Sprintf("%d spans", len(body.Data[0].Spans))
			}
		}
		if err != nil {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s not in Jaeger with %s after 20 s (last: %s)", id, what, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func TestThreeHopInJaeger(t *testing.T) {
	if !jaegerReachable() {
		t.Fatal("no Jaeger answers on " + jaegerQuery + ": start one with scripts/jaeger.sh start (.ci/run does)")
	}
	traces := runDemo(t)

	t.Run("propagated deadline spans all four services, budgets decreasing", func(t *testing.T) {
		id, ok := traces["wasted work: deadline propagated"]
		if !ok {
			t.Fatalf("threehop printed no trace for the propagated run: %v", traces)
		}
		tr := fetchTrace(t, id, 7)
		services := map[string]bool{}
		for _, s := range tr.Spans {
			services[tr.service(s)] = true
		}
		for _, want := range []string{"threehop-client", "threehop-a", "threehop-b", "threehop-c"} {
			if !services[want] {
				t.Errorf("trace %s has no span of %s (services %v)", id, want, services)
			}
		}
		// The budget as it travelled: sent by the client, received and passed on by
		// A and B, received by C. Each reading is less than the one before.
		steps := []struct{ service, key string }{
			{"threehop-client", "deadlinekit.budget.sent_ms"},
			{"threehop-a", "deadlinekit.budget.received_ms"},
			{"threehop-a", "deadlinekit.budget.sent_ms"},
			{"threehop-b", "deadlinekit.budget.received_ms"},
			{"threehop-b", "deadlinekit.budget.sent_ms"},
			{"threehop-c", "deadlinekit.budget.received_ms"},
		}
		prev := 1e18
		for _, st := range steps {
			spans := tr.spansWith(st.service, st.key)
			if len(spans) == 0 {
				t.Fatalf("no %s span carries %s", st.service, st.key)
			}
			v := spans[0].float(t, st.key)
			t.Logf("%-16s %-32s %8.2f ms", st.service, st.key, v)
			if v <= 0 || v >= prev {
				t.Errorf("%s %s = %.3f ms; want positive and below the previous hop's %.3f", st.service, st.key, v, prev)
			}
			prev = v
		}
		if src, _ := tr.spansWith("threehop-c", "deadlinekit.budget.source")[0].tag("deadlinekit.budget.source"); src != "grpc-timeout" {
			t.Errorf("C's budget source %v; want grpc-timeout", src)
		}
	})

	t.Run("without the toolkit C works past the client's give-up, in the same trace", func(t *testing.T) {
		id, ok := traces["wasted work: independent 300 ms timeouts"]
		if !ok {
			t.Fatalf("threehop printed no trace for the run without the toolkit: %v", traces)
		}
		tr := fetchTrace(t, id, 7)
		// The client gave up when its last span ended: its call span ends when the
		// call returns at the client's deadline, its root span just after.
		var gaveUp int64
		var cs []jaegerSpan
		for _, s := range tr.Spans {
			switch tr.service(s) {
			case "threehop-client":
				gaveUp = max(gaveUp, s.StartTime+s.Duration)
			case "threehop-c":
				cs = append(cs, s)
			}
		}
		if gaveUp == 0 {
			t.Fatalf("trace %s has no span of threehop-client", id)
		}
		if len(cs) != 1 {
			t.Fatalf("trace %s has %d spans of threehop-c; want 1 (the hops must carry the trace, if not the deadline)", id, len(cs))
		}
		c := cs[0]
		past := time.Duration(c.StartTime+c.Duration-gaveUp) * time.Microsecond
		t.Logf("C's span ends %v after the client gave up", past)
		if past <= 0 {
			t.Errorf("C's span ends %v after the client's last span; want after it (C works on after the client gave up)", past)
		}
	})

	t.Run("short-circuited request carries its attributes", func(t *testing.T) {
		id, ok := traces["short-circuit: C guarded"]
		if !ok {
			t.Fatalf("threehop printed no trace for the short-circuited request: %v", traces)
		}
		tr := fetchTrace(t, id, 6)
		spans := tr.spansWith("threehop-c", "deadlinekit.shortcircuit.rejected")
		if len(spans) != 1 {
			t.Fatalf("%d spans of threehop-c carry deadlinekit.shortcircuit.rejected; want 1", len(spans))
		}
		c := spans[0]
		if v, _ := c.tag("deadlinekit.shortcircuit.rejected"); v != true {
			t.Errorf("rejected = %v; want true", v)
		}
		if floor := c.float(t, "deadlinekit.shortcircuit.floor_ms"); floor != 20 {
			t.Errorf("floor_ms = %v; want 20", floor)
		}
		left := c.float(t, "deadlinekit.shortcircuit.remaining_ms")
		if left <= 0 || left >= 20 {
			t.Errorf("remaining_ms = %v; want between 0 and the 20 ms floor", left)
		}
		if v, _ := c.tag("http.response.status_code"); v != float64(504) {
			t.Errorf("C answered %v; want 504", v)
		}
		t.Logf("C refused with %.2f ms left, floor 20 ms", left)
	})

	t.Run("retried call carries its attempts", func(t *testing.T) {
		id, ok := traces["retry: C down, package retry on every layer"]
		if !ok {
			t.Fatalf("threehop printed no trace for the retried request: %v", traces)
		}
		tr := fetchTrace(t, id, 10)
		// B's outbound call to C: three attempts, then it gave up.
		calls := tr.spansWith("threehop-b", "deadlinekit.retry.stop_reason")
		if len(calls) != 1 {
			t.Fatalf("%d spans of threehop-b carry a retry stop reason; want 1", len(calls))
		}
		call := calls[0]
		if n := call.float(t, "deadlinekit.attempts"); n != 3 {
			t.Errorf("B's call to C: attempts = %v; want 3", n)
		}
		if n := call.float(t, "deadlinekit.retry.count"); n != 2 {
			t.Errorf("B's call to C: retries = %v; want 2", n)
		}
		if r, _ := call.tag("deadlinekit.retry.stop_reason"); r != "attempts_exhausted" {
			t.Errorf("B's call to C: stop reason %v; want attempts_exhausted", r)
		}
		attempts := tr.spansWith("threehop-b", "deadlinekit.attempt.number")
		if len(attempts) != 3 {
			t.Fatalf("%d attempt spans in threehop-b; want 3", len(attempts))
		}
		for i, a := range attempts {
			kind := "retry"
			if i == 0 {
				kind = "primary"
			}
			if k, _ := a.tag("deadlinekit.attempt.kind"); k != kind {
				t.Errorf("attempt %d kind %v; want %s", i+1, k, kind)
			}
			if n := a.float(t, "http.request.resend_count"); n != float64(i) {
				t.Errorf("attempt %d http.request.resend_count %v; want %d", i+1, n, i)
			}
		}
		// The layers above did not retry: C saw three requests in all.
		if cs := tr.spansWith("threehop-c", "deadlinekit.budget.received_ms"); len(cs) != 3 {
			t.Errorf("C served %d requests of this user request; want 3", len(cs))
		}
		if as := tr.spansWith("threehop-a", "deadlinekit.retry.stop_reason"); len(as) != 1 {
			t.Errorf("A's call to B: %d spans with a stop reason; want 1", len(as))
		} else if r, _ := as[0].tag("deadlinekit.retry.stop_reason"); r != "downstream_retried" {
			t.Errorf("A's call to B stopped for %v; want downstream_retried (B said it already retried)", r)
		}
	})

	t.Run("hedged call carries its attempts", func(t *testing.T) {
		id, ok := traces["hedging: a call the hedge won"]
		if !ok {
			t.Fatalf("threehop printed no trace for a hedged call: %v", traces)
		}
		tr := fetchTrace(t, id, 5)
		calls := tr.spansWith("threehop-b", "deadlinekit.hedge.won")
		if len(calls) != 1 {
			t.Fatalf("%d spans of threehop-b carry deadlinekit.hedge.won; want 1", len(calls))
		}
		call := calls[0]
		if v, _ := call.tag("deadlinekit.hedge.won"); v != true {
			t.Errorf("hedge.won = %v; want true", v)
		}
		if n := call.float(t, "deadlinekit.hedge.count"); n != 1 {
			t.Errorf("hedge.count = %v; want 1", n)
		}
		if n := call.float(t, "deadlinekit.attempts"); n != 2 {
			t.Errorf("attempts = %v; want 2", n)
		}
		attempts := tr.spansWith("threehop-b", "deadlinekit.attempt.kind")
		if len(attempts) != 2 {
			t.Fatalf("%d attempt spans; want 2", len(attempts))
		}
		want := map[string]string{"primary": "canceled", "hedge": "success"}
		for _, a := range attempts {
			kind, _ := a.tag("deadlinekit.attempt.kind")
			outcome, _ := a.tag("deadlinekit.attempt.outcome")
			if want[kind.(string)] != outcome {
				t.Errorf("%v attempt ended %v; want %s", kind, outcome, want[kind.(string)])
			}
			if kind == "hedge" {
				if n := a.float(t, "http.request.resend_count"); n != 1 {
					t.Errorf("hedge attempt http.request.resend_count = %v; want 1", n)
				}
			}
		}
	})

	t.Run("breaker's refused call carries the open circuit and sent nothing", func(t *testing.T) {
		id, ok := traces["circuit breaker: a call refused, circuit open"]
		if !ok {
			t.Fatalf("threehop printed no trace for a refused call: %v", traces)
		}
		// B's root, its call's span and the refused attempt's.
		tr := fetchTrace(t, id, 3)
		spans := tr.spansWith("threehop-b", "deadlinekit.breaker.refused")
		if len(spans) == 0 {
			t.Fatal("no span of threehop-b carries deadlinekit.breaker.refused")
		}
		for _, s := range spans {
			if v, _ := s.tag("deadlinekit.breaker.refused"); v != true {
				t.Errorf("%s: refused = %v; want true", s.OperationName, v)
			}
			if v, _ := s.tag("deadlinekit.breaker.state"); v != "open" {
				t.Errorf("%s: state = %v; want open", s.OperationName, v)
			}
			if wait := s.float(t, "deadlinekit.breaker.retry_after_ms"); wait <= 0 {
				t.Errorf("%s: retry_after_ms = %v; want the time until the next probe", s.OperationName, wait)
			}
		}
		for _, s := range tr.Spans {
			if tr.service(s) == "threehop-c" {
				t.Errorf("the refused call reached C: span %q", s.OperationName)
			}
		}
	})

	t.Run("breaker's probe carries its mark and reached C", func(t *testing.T) {
		id, ok := traces["circuit breaker: the probe that found C back"]
		if !ok {
			t.Fatalf("threehop printed no trace for a probe: %v", traces)
		}
		// B's root, its call's span, the probe's attempt (after one refused, when the
		// retry layer waited for the probe) and C's server span.
		tr := fetchTrace(t, id, 4)
		spans := tr.spansWith("threehop-b", "deadlinekit.breaker.probe")
		if len(spans) == 0 {
			t.Fatal("no span of threehop-b carries deadlinekit.breaker.probe")
		}
		for _, s := range spans {
			if v, _ := s.tag("deadlinekit.breaker.probe"); v != true {
				t.Errorf("%s: probe = %v; want true", s.OperationName, v)
			}
			if v, _ := s.tag("deadlinekit.breaker.state"); v != "half_open" {
				t.Errorf("%s: state = %v; want half_open", s.OperationName, v)
			}
		}
		cs := tr.spansWith("threehop-c", "http.response.status_code")
		if len(cs) != 1 {
			t.Fatalf("%d spans of threehop-c in the probe's trace; want 1", len(cs))
		}
		if v, _ := cs[0].tag("http.response.status_code"); v != float64(200) {
			t.Errorf("C answered the probe %v; want 200", v)
		}
	})

	t.Run("overload's refused request carries C's admission decision", func(t *testing.T) {
		id, ok := traces["overload: a request C refused at once"]
		if !ok {
			t.Fatalf("threehop printed no trace for a refused request: %v", traces)
		}
		// B's root, its call's span, an attempt's and C's server span at least; C's
		// may reach Jaeger after B's.
		const key = "deadlinekit.shortcircuit.admission"
		tr := fetchTraceUntil(t, id, "4 spans, one of threehop-c with "+key, func(tr jaegerTrace) bool {
			return len(tr.Spans) >= 4 && len(tr.spansWith("threehop-c", key)) > 0
		})
		spans := tr.spansWith("threehop-c", key)
		if len(spans) == 0 {
			t.Fatal("no span of threehop-c carries deadlinekit.shortcircuit.admission")
		}
		refused := 0
		for _, s := range spans {
			switch v, _ := s.tag("deadlinekit.shortcircuit.admission"); v {
			case "overloaded", "cannot_finish", "dropped":
				refused++
			case "admitted":
			default:
				t.Errorf("%s: admission = %v", s.OperationName, v)
			}
		}
		if refused == 0 {
			t.Error("none of C's spans in the refused request's trace says it was refused")
		}
	})
}
