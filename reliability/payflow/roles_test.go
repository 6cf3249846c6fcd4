package payflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/retry"
)

// The environment of a role process (this test binary again, run by TestMain).
const (
	envRole     = "PAYFLOW_ROLE"     // ledger, payments, gateway, client
	envRedis    = "PAYFLOW_REDIS"    // payments: the redis-server's host:port
	envLedger   = "PAYFLOW_LEDGER"   // payments: the ledger's base URL
	envReplicas = "PAYFLOW_REPLICAS" // gateway: the payments replicas' host:port, comma-separated
	envGateway  = "PAYFLOW_GATEWAY"  // client: the gateway's base URL
	envRate     = "PAYFLOW_RATE"     // client: payments per second
	envCount    = "PAYFLOW_COUNT"    // client: payments to send
	envDrop     = "PAYFLOW_DROP"     // client: the share of answers dropped, in [0, 1)
	envSeed     = "PAYFLOW_SEED"     // client: the seed of the drops
	envOut      = "PAYFLOW_OUT"      // client: the file its records go to, one JSON line each
	envPrefix   = "PAYFLOW_PREFIX"   // client: the prefix of the payment ids
)

// fdListen is the file descriptor of a server role's listener, opened by the test
// (so that its address is known before the process starts, and connections made
// before it serves wait in the backlog).
const fdListen = 3

// budget is each payment's time budget at the client.
const budget = 3 * time.Second

// payMethod is the payments service's one method, registered by hand as a user
// without generated code would: google.protobuf.StringValue in and out (the
// payment's JSON, the charge's JSON).
const payMethod = "/payflow.Payments/Pay"

// Work of a payments handler before and after its charge: the window after it is
// where a replica killed mid-request has charged and not answered.
const (
	workBefore = 5 * time.Millisecond
	workAfter  = 30 * time.Millisecond
)

// runRole runs this process as the role named, until SIGTERM (a server) or until its
// payments are all answered (the client).
func runRole(role string) error {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	defer signal.Stop(stop)
	tp, stopTracing, err := tracing(role)
	if err != nil {
		return err
	}
	defer stopTracing()
	if role == "client" {
		return runClient(tp)
	}
	l, err := net.FileListener(os.NewFile(fdListen, "listener"))
	if err != nil {
		return err
	}
	switch role {
	case "ledger":
		return serveHTTP(l, stop, tracedHandler(tp, ledger(), "ledger"))
	case "payments":
		return runPayments(l, stop, tp)
	case "gateway":
		h, closeConn, err := gateway(tp)
		if err != nil {
			return err
		}
		defer closeConn()
		return serveHTTP(l, stop, tracedHandler(tp, h, "gateway"))
	}
	return fmt.Errorf("unknown role %q", role)
}

// tracedHandler is h under otelhttp when tracing is on (tp not nil).
func tracedHandler(tp trace.TracerProvider, h http.Handler, name string) http.Handler {
	if tp == nil {
		return h
	}
	return otelhttp.NewHandler(h, name, otelhttp.WithTracerProvider(tp))
}

// tracedTransport is rt under otelhttp when tracing is on (tp not nil).
func tracedTransport(tp trace.TracerProvider, rt http.RoundTripper) http.RoundTripper {
	if tp == nil {
		return rt
	}
	return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(tp))
}

func serveHTTP(l net.Listener, stop <-chan os.Signal, h http.Handler) error {
	srv := &http.Server{Handler: h}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-stop:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}

// charge is the body of a payment, from the client to the ledger.
type charge struct {
	Payment string `json:"payment"`
	Amount  int    `json:"amount"`
}

// ledger counts the charges of each payment (POST /charge) and tells them (GET
// /charges), behind the root stack with dedup on its own memory store: a payments
// replica's write to it carries a key derived from the payment's key.
func ledger() http.Handler {
	var mu sync.Mutex
	charges := map[string]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charge", func(w http.ResponseWriter, r *http.Request) {
		var c charge
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.Payment == "" {
			http.Error(w, "ledger: a charge names its payment", http.StatusBadRequest)
			return
		}
		mu.Lock()
		charges[c.Payment]++
		n := charges[c.Payment]
		mu.Unlock()
		writeJSON(w, map[string]any{"payment": c.Payment, "charge": n})
	})
	keys := map[string]int{} // requests to POST /charge per Idempotency-Key, replays included
	mux.HandleFunc("GET /charges", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		repeats := 0
		for _, n := range keys {
			repeats += n - 1
		}
		writeJSON(w, ledgerState{Charges: charges, Repeats: repeats})
	})
	h := deadlinekit.NewHandler(mux, deadlinekit.WithDedup(dedup.NewMemoryStore()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := r.Header.Get("Idempotency-Key"); k != "" && r.Method == http.MethodPost {
			mu.Lock()
			keys[k]++
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// ledgerState is the ledger's answer to GET /charges: the charges of each payment,
// and the requests to charge that repeated a key already seen (a payments replica's
// retry, or its re-run of a payment after a crash, each meeting the stored answer).
type ledgerState struct {
	Charges map[string]int `json:"charges"`
	Repeats int            `json:"repeats"`
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// runPayments serves the payments service over gRPC: the root stack with dedup on a
// redisstore over a go-redis client with its default options, as the README shows.
func runPayments(l net.Listener, stop <-chan os.Signal, tp trace.TracerProvider) error {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	p := &payments{
		ledger: os.Getenv(envLedger),
		client: &http.Client{Transport: tracedTransport(tp, deadlinekit.NewTransport(nil, deadlinekit.WithRetry(retry.WithIdempotencyKeys(nil))))},
	}
	opts := deadlinekit.ServerOptions(deadlinekit.WithDedup(redisstore.New(rdb)))
	if tp != nil {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
	}
	gs := grpc.NewServer(opts...)
	gs.RegisterService(&paymentsService, p)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-stop:
	}
	gs.GracefulStop()
	return nil
}

type payments struct {
	ledger string
	client *http.Client
}

// pay checks the payment, charges it at the ledger, and writes its receipt.
func (p *payments) pay(ctx context.Context, payment string) (string, error) {
	if err := sleep(ctx, workBefore); err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.ledger+"/charge", strings.NewReader(payment))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err := deadlinekit.FromHTTP(resp, err); err != nil {
		return "", deadlinekit.GRPCError(ctx, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", deadlinekit.GRPCError(ctx, err)
	}
	if err := sleep(ctx, workAfter); err != nil {
		return "", err
	}
	return string(b), nil
}

// sleep waits d, or returns the context's error (as a gRPC status) when it ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return deadlinekit.GRPCError(ctx, ctx.Err())
	}
}

var paymentsService = grpc.ServiceDesc{
	ServiceName: "payflow.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Pay",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				out, err := srv.(*payments).pay(ctx, req.(*wrapperspb.StringValue).GetValue())
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(out), nil
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: payMethod}, h)
		},
	}},
}

// gateway is the HTTP edge: POST /pay calls the payments replicas over gRPC, round
// robin with a circuit per replica (DialOptions' default policy), through the root
// stack. The stack passes the payment's key on: the gateway's call carries a key
// derived from the inbound Idempotency-Key (dedup.PassKeys), the same when the
// client sends the payment again.
func gateway(tp trace.TracerProvider) (http.Handler, func(), error) {
	r := manual.NewBuilderWithScheme("payflow")
	var addrs []resolver.Address
	for a := range strings.SplitSeq(os.Getenv(envReplicas), ",") {
		addrs = append(addrs, resolver.Address{Addr: a})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	opts := append(deadlinekit.DialOptions(),
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if tp != nil {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))))
	}
	conn, err := grpc.NewClient("payflow:///payments", opts...)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			deadlinekit.WriteHTTPError(w, deadlinekit.Public(r.Context(), err))
			return
		}
		ctx := r.Context()
		var out wrapperspb.StringValue
		if err := deadlinekit.FromGRPC(conn.Invoke(ctx, payMethod, wrapperspb.String(string(body)), &out), nil); err != nil {
			deadlinekit.WriteHTTPError(w, deadlinekit.Public(ctx, err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, out.GetValue())
	})
	return deadlinekit.NewHandler(mux), func() { conn.Close() }, nil
}

// record is what the client saw of one payment.
type record struct {
	ID    string  `json:"id"`
	First outcome `json:"first"`
	// Resend is the payment sent again with the same key and a fresh budget, once
	// the first send's lease has surely ended (resendAfter after its budget), when
	// the first ended without an answer the user may retry: a transport failure,
	// 409, or a 5xx.
	Resend   *outcome `json:"resend,omitempty"`
	Attempts int      `json:"attempts"` // requests that reached the transport
	Dropped  int      `json:"dropped"`  // answers the transport dropped
}

// outcome is the end of one send of a payment.
type outcome struct {
	Sent   int64  `json:"sent"` // Unix ns
	Done   int64  `json:"done"` // Unix ns: the answer, or the failure
	Status int    `json:"status,omitempty"`
	Err    string `json:"err,omitempty"`
	Body   string `json:"body,omitempty"` // of a refusal, cut short
}

func (o outcome) answered() bool { return o.Status == http.StatusOK && o.Err == "" }

// retryable reports whether a user would send the payment again after o.
func (o outcome) retryable() bool {
	return !o.answered() && (o.Status == 0 || o.Status == http.StatusConflict || o.Status >= 500)
}

// resendAfter is how long after a send's budget the client resends it: past the
// lease margin (dedup.DefaultLeaseMargin, 1 s) of a replica that died holding it.
const resendAfter = 1500 * time.Millisecond

// clientStarted is the line the client writes as it sends its first payment.
const clientStarted = "payflow client: sending"

// clientSent is the line the client writes as it sends payment i (its format).
const clientSent = "payflow client: sent %d"

// runClient sends payments at a fixed arrival rate (open loop), each with its own
// Idempotency-Key and a 3 s budget, through the root client stack, whose retries
// resend a payment whose answer was lost or refused. A share of the answers is
// dropped after the gateway sent them, as a broken connection would.
func runClient(tp trace.TracerProvider) error {
	rate, _ := strconv.ParseFloat(os.Getenv(envRate), 64)
	n, _ := strconv.Atoi(os.Getenv(envCount))
	drop, _ := strconv.ParseFloat(os.Getenv(envDrop), 64)
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	url, prefix := os.Getenv(envGateway), os.Getenv(envPrefix)
	f, err := os.Create(os.Getenv(envOut))
	if err != nil {
		return err
	}
	defer f.Close()
	d := &dropper{base: http.DefaultTransport.(*http.Transport).Clone(), p: drop, rng: rand.New(rand.NewPCG(seed, 36)),
		attempts: map[string]int{}, dropped: map[string]int{}}
	client := &http.Client{Transport: tracedTransport(tp, deadlinekit.NewTransport(d))}
	recs := make([]record, n)
	var wg sync.WaitGroup
	fmt.Println(clientStarted)
	// Open loop: payment i goes at start + i/rate, whatever the earlier ones are
	// doing; a late timer sends at once, so the schedule does not stretch.
	start := time.Now()
	due := time.NewTimer(0)
	defer due.Stop()
	for i := range n {
		due.Reset(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		<-due.C
		fmt.Printf(clientSent+"\n", i) // the test times its faults by these
		wg.Go(func() {
			recs[i] = pay(client, url, fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("key-%s-%d-%d", prefix, i, seed))
		})
	}
	wg.Wait()
	var buf bytes.Buffer
	for i := range recs {
		recs[i].Attempts, recs[i].Dropped = d.count(recs[i].ID)
		b, _ := json.Marshal(recs[i])
		buf.Write(append(b, '\n'))
	}
	_, err = f.Write(buf.Bytes())
	return err
}

// pay sends one payment, and once more if the first send ended in a way the user
// may retry.
func pay(client *http.Client, url, id, key string) record {
	rec := record{ID: id, First: send(client, url, id, key)}
	if rec.First.retryable() {
		// The user comes back once the first send's budget and resendAfter have
		// passed, as a person would, by the clock: a role in its own process.
		<-time.After(time.Until(time.Unix(0, rec.First.Sent).Add(budget + resendAfter)))
		o := send(client, url, id, key)
		rec.Resend = &o
	}
	return rec
}

func send(client *http.Client, url, id, key string) outcome {
	o := outcome{Sent: time.Now().UnixNano()}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	body, _ := json.Marshal(charge{Payment: id, Amount: 100})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/pay", bytes.NewReader(body))
	if err != nil {
		o.Err, o.Done = err.Error(), time.Now().UnixNano()
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Payment", id) // for the dropper's counts
	resp, err := client.Do(req)
	if err != nil {
		o.Err, o.Done = err.Error(), time.Now().UnixNano()
		return o
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	o.Status = resp.StatusCode
	if err != nil {
		o.Err = err.Error()
	}
	if resp.StatusCode != http.StatusOK {
		o.Body = string(b[:min(len(b), 120)])
	}
	o.Done = time.Now().UnixNano()
	return o
}

// errDropped is a dropped answer: the request reached the gateway, its answer was lost.
var errDropped = fmt.Errorf("payflow: the answer was lost on the way back: %w", syscall.ECONNRESET)

// dropper is the client's base transport: it counts the attempts of each payment
// and drops a share p of the answers (after reading them: the gateway sent them).
type dropper struct {
	base     http.RoundTripper
	p        float64
	mu       sync.Mutex
	rng      *rand.Rand
	attempts map[string]int
	dropped  map[string]int
}

func (d *dropper) RoundTrip(req *http.Request) (*http.Response, error) {
	id := req.Header.Get("X-Payment")
	d.mu.Lock()
	d.attempts[id]++
	d.mu.Unlock()
	resp, err := d.base.RoundTrip(req)
	if err != nil || d.p == 0 {
		return resp, err
	}
	d.mu.Lock()
	lose := d.rng.Float64() < d.p
	if lose {
		d.dropped[id]++
	}
	d.mu.Unlock()
	if !lose {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errDropped
}

func (d *dropper) count(id string) (attempts, dropped int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.attempts[id], d.dropped[id]
}
