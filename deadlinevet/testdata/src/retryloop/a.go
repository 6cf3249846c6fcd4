package retryloop

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/retry"
	"google.golang.org/grpc"
)

type Ping struct{}

type PingClient interface {
	Ping(ctx context.Context, in *Ping, opts ...grpc.CallOption) (*Ping, error)
}

type pingClient struct{ cc grpc.ClientConnInterface }

func NewPingClient(cc grpc.ClientConnInterface) PingClient { return &pingClient{cc} }

func (c *pingClient) Ping(ctx context.Context, in *Ping, opts ...grpc.CallOption) (*Ping, error) {
	out := new(Ping)
	return out, c.cc.Invoke(ctx, "/p.P/Ping", in, out, opts...)
}

type service struct {
	http  *http.Client
	ping  PingClient
	plain *http.Client
}

func newService() *service {
	conn, _ := grpc.NewClient("dns:///b", deadlinekit.DialOptions()...)
	return &service{
		http:  &http.Client{Transport: deadlinekit.NewTransport(nil)},
		ping:  NewPingClient(conn),
		plain: &http.Client{},
	}
}

func (s *service) get(ctx context.Context, req *http.Request) (*http.Response, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ { // want `a hand-written retry loop around s.http.Do, whose client already retries \(deadlinekit.NewTransport, line 40\): the attempts multiply`
		resp, err := s.http.Do(req)
		if err == nil {
			return resp, nil
		}
		time.Sleep(100 * time.Millisecond) // want `time.Sleep where ctx is at hand`
	}
	return nil, err
}

func (s *service) ping3(ctx context.Context) error {
	for i := range 3 { // want `a hand-written retry loop around s.ping.Ping, whose client already retries \(deadlinekit.DialOptions, line 38\)`
		_, err := s.ping.Ping(ctx, &Ping{})
		if err != nil {
			_ = i
			continue
		}
		return nil
	}
	return errors.New("gave up")
}

// gRPC's own retry policy, in the service config.
const serviceConfig = `{"methodConfig": [{"name": [{"service": "p.P"}], "retryPolicy": {"maxAttempts": 3}}]}`

func serviceConfigured(ctx context.Context) {
	conn, _ := grpc.NewClient("dns:///b", grpc.WithDefaultServiceConfig(serviceConfig))
	client := NewPingClient(conn)
	var err error
	for err = errors.New(""); err != nil; { // want `around client.Ping, whose client already retries \(grpc.WithDefaultServiceConfig with a "retryPolicy", line 74\)`
		_, err = client.Ping(ctx, &Ping{})
	}
}

func interceptors(ctx context.Context) {
	conn, _ := grpc.NewClient("dns:///b", grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(retry.WithMaxAttempts(3))))
	for { // want `around conn.Invoke, whose client already retries \(retry.UnaryClientInterceptor, line 83\)`
		err := conn.Invoke(ctx, "/p.P/Ping", nil, nil)
		if err == nil {
			break
		}
	}
}

func connectClient(ctx context.Context) {
	hc := &http.Client{Transport: retry.NewTransport(nil)}
	a := connect.NewClient[Ping, Ping](hc, "http://b/p.P/Ping")
	b := connect.NewClient[Ping, Ping](http.DefaultClient, "http://b/p.P/Ping", connectkit.ClientOption())
	c := connect.NewClient[Ping, Ping](http.DefaultClient, "http://b/p.P/Ping", connect.WithInterceptors(connectkit.Retry()))
	for { // want `around a.CallUnary, whose client already retries \(retry.NewTransport, line 93\)`
		if _, err := a.CallUnary(ctx, connect.NewRequest(&Ping{})); err == nil {
			break
		}
	}
	for { // want `around b.CallUnary, whose client already retries \(connectkit.ClientOption, line 95\)`
		_, err := b.CallUnary(ctx, connect.NewRequest(&Ping{}))
		if err == nil {
			break
		}
	}
	for { // want `around c.CallUnary, whose client already retries \(connectkit.Retry, line 96\)`
		_, err := c.CallUnary(ctx, connect.NewRequest(&Ping{}))
		if err == nil {
			return
		}
	}
}

// Negatives.

// A client without a retry layer: a hand-written loop is the only retrying.
func (s *service) plainLoop(req *http.Request) {
	for i := 0; i < 3; i++ {
		if _, err := s.plain.Do(req); err == nil {
			return
		}
	}
}

// A stack told to leave retrying out.
func without(req *http.Request) {
	c := &http.Client{Transport: deadlinekit.NewTransport(nil, deadlinekit.Without(deadlinekit.Retry))}
	for {
		if _, err := c.Do(req); err == nil {
			return
		}
	}
}

// A loop over items sends each once: not a retry.
func (s *service) each(reqs []*http.Request) error {
	for _, req := range reqs {
		_, err := s.http.Do(req)
		if err != nil {
			continue
		}
	}
	return nil
}

// A loop that stops at the first error does not retry.
func (s *service) untilError(req *http.Request) error {
	for {
		_, err := s.http.Do(req)
		if err != nil {
			return err
		}
	}
}

// The response of a retrying client does not retry.
func (s *service) body(req *http.Request) {
	resp, _ := s.http.Do(req)
	buf := make([]byte, 10)
	for {
		_, err := resp.Body.Read(buf)
		if err != nil {
			continue
		}
		break
	}
}

// A loop over budgets builds each turn's context from its item: not a retry.
func (s *service) budgets(req *http.Request) {
	for _, budget := range []time.Duration{time.Second, time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), budget) // want `context.Background\(\) where req.Context\(\) is at hand`
		_, err := s.http.Do(req.WithContext(ctx))
		cancel()
		if err != nil {
			continue
		}
	}
}

// A loop over backoffs is a retry loop all the same.
func (s *service) backoffs(req *http.Request) error {
	var err error
	for _, wait := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond} { // want `around s.http.Do, whose client already retries`
		if _, err = s.http.Do(req); err == nil {
			return nil
		}
		time.Sleep(wait) // want `time.Sleep where req.Context\(\) is at hand`
	}
	return err
}
