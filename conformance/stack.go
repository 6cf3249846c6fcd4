// Package conformance adds the deadlinekit stack to connect-go's conformance
// reference implementations (connectrpc.com/conformance), so that its suite judges
// connectkit's HandlerOption and ClientOption.
//
// The reference server and client live in internal packages of that module; the
// script scripts/conformance.sh copies the module, applies stack.patch (two lines
// that append [HandlerOptions] and [ClientOptions] to the options the reference
// implementations build), and builds them. The environment variable
// DEADLINEKIT_STACK chooses the variant, so that one binary runs bare and with the
// stack: see [Variant].
package conformance

import (
	"fmt"
	"os"

	"connectrpc.com/connect"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// Env is the environment variable that chooses the variant.
const Env = "DEADLINEKIT_STACK"

// Variant is what a reference implementation adds to its connect options:
//
//   - "off" (or unset): nothing, the bare reference;
//   - "default": connectkit.HandlerOption() on the server, ClientOption() on the
//     client, the stack's defaults;
//   - "nodefault": the same with WithPropagate(propagate.WithDefaultTimeout(0)): no
//     default budget for a request that came without a deadline.
type Variant string

// FromEnv reads the variant from [Env]; an unknown value is an error naming it.
func FromEnv() (Variant, error) {
	switch v := Variant(os.Getenv(Env)); v {
	case "", "off":
		return "off", nil
	case "default", "nodefault":
		return v, nil
	default:
		return "", fmt.Errorf("%s=%q: want off, default or nodefault", Env, string(v))
	}
}

func (v Variant) options() []deadlinekit.Option {
	if v == "nodefault" {
		return []deadlinekit.Option{deadlinekit.WithPropagate(propagate.WithDefaultTimeout(0))}
	}
	return nil
}

// HandlerOptions are the options the variant adds to a connect handler.
func (v Variant) HandlerOptions() []connect.HandlerOption {
	if v == "off" {
		return nil
	}
	return []connect.HandlerOption{connectkit.HandlerOption(v.options()...)}
}

// ClientOptions are the options the variant adds to a connect client: a stack of
// its own per call, as the reference client makes a client of its own per test case.
func (v Variant) ClientOptions() []connect.ClientOption {
	if v == "off" {
		return nil
	}
	return []connect.ClientOption{connectkit.ClientOption(v.options()...)}
}

// MustFromEnv is [FromEnv] for the patched reference implementations: an unknown
// variant stops the process with the error.
func MustFromEnv() Variant {
	v, err := FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return v
}
