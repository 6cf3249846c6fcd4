// Package connectkit is the part of the toolkit's connect API the analyzer's tests call.
package connectkit

import (
	"connectrpc.com/connect"
	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/retry"
)

func ClientOption(opts ...deadlinekit.Option) connect.ClientOption { return nil }
func Retry(opts ...retry.Option) connect.Interceptor               { return nil }
