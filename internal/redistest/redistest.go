// Package redistest starts a real redis-server (Debian's redis-server package) on a
// free loopback port for tests and benchmarks, and stops and restarts it. Without
// the binary a test is skipped with a message saying how to install it, except
// under CI=true, where it fails. Only tests and benchmarks import it.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is one redis-server process (or none, between Stop and Start).
type Server struct {
	Addr string
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// Start starts redis-server on a free port, and stops it when tb ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found: install it (apt-get install redis-server) to run the Redis tests"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port}
	if err := s.start(bin); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func (s *Server) start(bin string) error {
	cmd := exec.Command(bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			ok := ping(c)
			c.Close()
			if ok {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return fmt.Errorf("redis-server on %s did not answer PING within 10s", s.Addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	return nil
}

func ping(c net.Conn) bool {
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// Stop kills the server (its data is gone: it persists nothing).
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// Restart stops the server and starts a new one on the same port.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.start(bin); err != nil {
		tb.Fatal(err)
	}
}
