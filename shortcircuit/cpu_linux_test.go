package shortcircuit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	//lint:ignore ST1019 grpc-go's convention: testgrpc for the service, testpb for its messages (one package)
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The CPU-time figure of issue 3: a gRPC server on loopback whose handler does 20 ms
// of CPU work, under a load where every other request arrives with 5 ms left. The
// server runs in a child process (this test binary again, diverted in TestMain), so
// its CPU time (getrusage: user + system, from the moment it listens until every
// handler has returned) is the server's alone, not the client's. Run the three
// configurations side by side in one invocation:
//
//	go test ./shortcircuit -run '^$' -bench ServerCPU -benchtime 200x
//
// cpu-ms/req is the server's CPU time per request; ran/req the share of requests whose
// handler ran.
const (
	cpuServerEnv = "SHORTCIRCUIT_CPU_SERVER"
	cpuWork      = 20 * time.Millisecond
	cpuShort     = 5 * time.Millisecond // the budget of every other request
	cpuLong      = 10 * time.Second
)

func BenchmarkServerCPU(b *testing.B) {
	for _, mode := range []string{"none", "static", "adaptive"} {
		b.Run(mode, func(b *testing.B) {
			cpu, runs := runCPUServer(b, mode, b.N)
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/req")
			b.ReportMetric(float64(runs)/float64(b.N), "ran/req")
		})
	}
}

// runCPUServer starts the server in a child process, sends n requests (alternately
// 5 ms and 10 s of budget, one at a time), and returns the server's CPU time and
// how many times its handler ran.
func runCPUServer(t testing.TB, mode string, n int) (time.Duration, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cpuServerEnv+"="+mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	lines := bufio.NewScanner(stdout)
	field := func(prefix string) string {
		for lines.Scan() {
			if v, ok := strings.CutPrefix(lines.Text(), prefix); ok {
				return v
			}
		}
		t.Fatalf("server (%s): no %q line", mode, prefix)
		return ""
	}
	addr := field("listening ")

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	client := testgrpc.NewTestServiceClient(conn)
	for i := range n {
		budget := cpuLong
		if i%2 == 0 {
			budget = cpuShort
		}
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		client.UnaryCall(ctx, &testpb.SimpleRequest{})
		cancel()
	}
	conn.Close()
	stdin.Close() // the server drains its handlers and reports
	var cpu time.Duration
	var runs int
	if _, err := fmt.Sscan(field("cpu "), &cpu, &runs); err != nil {
		t.Fatalf("server (%s): %v", mode, err)
	}
	io.Copy(io.Discard, stdout)
	return cpu, runs
}

// The child process of BenchmarkServerCPU runs the server instead of the tests.
func init() {
	if mode := os.Getenv(cpuServerEnv); mode != "" {
		os.Exit(cpuServerMain(mode))
	}
}

// cpuServerMain serves until its standard input closes, then prints its CPU time.
func cpuServerMain(mode string) int {
	var opts []grpc.ServerOption
	switch mode {
	case "static":
		opts = append(opts, grpc.UnaryInterceptor(shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(cpuWork))))
	case "adaptive":
		opts = append(opts, grpc.UnaryInterceptor(shortcircuit.UnaryServerInterceptor(shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive))))
	}
	srv := grpc.NewServer(opts...)
	svc := &burner{}
	testgrpc.RegisterTestServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go srv.Serve(lis)
	start := processCPU()
	fmt.Printf("listening %s\n", lis.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.GracefulStop() // waits for handlers still burning for callers long gone
	fmt.Printf("cpu %d %d\n", processCPU()-start, svc.runs.Load())
	return 0
}

type burner struct {
	testgrpc.UnimplementedTestServiceServer
	runs atomic.Int64
}

// UnaryCall does cpuWork of CPU work, whatever the context says: a handler that does
// not watch its deadline, the case the guard is for.
func (b *burner) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	b.runs.Add(1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for start := threadCPU(); threadCPU()-start < cpuWork; {
		for i := 0; i < 1000; i++ {
			sink.Add(1)
		}
	}
	return &testpb.SimpleResponse{}, nil
}

var sink atomic.Int64

// threadCPU is the CPU time of the calling OS thread.
func threadCPU() time.Duration {
	const clockThreadCPUTimeID = 3 // CLOCK_THREAD_CPUTIME_ID
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
