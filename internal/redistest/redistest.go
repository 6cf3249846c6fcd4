// Package redistest starts a real redis-server (Debian's redis-server package) on a
// free loopback port for tests and benchmarks, and stops and restarts it. Without
// the binary a test is skipped with a message saying how to install it, except
// under CI=true, where it fails. Only tests and benchmarks import it.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process (or none, between Stop and Start).
type Server struct {
	Addr   string
	port   int
	dir    string   // with persistence: the append-only file's directory
	args   []string // more arguments to redis-server (a Cluster node's)
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd exited
}

// ErrNotInstalled is what Run returns when redis-server is not on the PATH.
var ErrNotInstalled = errors.New("redis-server not found: install it (apt-get install redis-server) to run the Redis tests")

// Start starts redis-server on a free port, and stops it when tb ends. Without the
// binary it fails tb ([ErrNotInstalled] says what to install): a store's test that
// skipped would pass having checked nothing.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := Run()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Run starts redis-server on a free port; the caller stops it.
func Run() (*Server, error) { return run("") }

// RunPersistent starts redis-server on a free port with an append-only file in dir,
// written on every command (appendfsync always): a restart keeps what was written.
func RunPersistent(dir string) (*Server, error) { return run(dir) }

func run(dir string, args ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	for try := 0; ; try++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: dir, args: args}
		err = s.start(bin)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) || try == 4 {
			return nil, err
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(bin string) error {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--daemonize", "no", "--loglevel", "warning"}
	if s.dir == "" {
		args = append(args, "--appendonly", "no")
	} else {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always", "--dir", s.dir)
	}
	args = append(args, s.args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited: // its port (or its cluster bus port) was taken
			return fmt.Errorf("%w: redis-server on %s exited at start", errPortTaken, s.Addr)
		default:
		}
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			pid, ok := processID(c)
			c.Close()
			if ok && pid == cmd.Process.Pid {
				break
			}
			if ok { // another process's server took the port first
				cmd.Process.Kill()
				<-exited
				return fmt.Errorf("%w: %s answers for process %d", errPortTaken, s.Addr, pid)
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on %s did not answer within 10s", s.Addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return nil
}

// errPortTaken: a free port was taken by another process before the server bound it.
var errPortTaken = errors.New("redistest: port taken")

// processID asks the server on c for its process id (INFO server), so that a
// server another process started on the same port is not taken for ours.
func processID(c net.Conn) (int, bool) {
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, false
	}
	rd := bufio.NewReader(c)
	head, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0, false // a LOADING error, or not yet a server
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return 0, false
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rd, body); err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			return pid, err == nil
		}
	}
	return 0, false
}

// Stop kills the server (its data is gone: it persists nothing).
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		<-exited
	}
}

// Kill kills the server with SIGKILL, as a crash would: it answers nothing more,
// and a connection to its port is refused until [Server.Restart] starts it again on
// the same port (its data is gone: it persists nothing, unless [RunPersistent]).
// Killing a killed server does nothing.
func (s *Server) Kill() { s.Stop() }

// Pause stops the server with SIGSTOP, as a stalled host would: it reads and
// answers nothing, on any connection, until [Server.Resume], while the kernel still
// accepts connections and what is sent on them. A killed server is not paused.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues the server after [Server.Pause]: it reads what waited and
// answers it.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Restart stops the server and starts a new one on the same port.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.RestartErr(); err != nil {
		tb.Fatal(err)
	}
}

// RestartErr is Restart for a caller without a testing.TB.
func (s *Server) RestartErr() error {
	s.Stop()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return ErrNotInstalled
	}
	return s.start(bin)
}

// signal sends sig to the running process; none running is no error.
func (s *Server) signal(sig os.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	return s.cmd.Process.Signal(sig)
}

// running reports whether the process was started and not stopped.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}
