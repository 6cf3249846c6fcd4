package hedge

// WithoutFastPath has every hedgeable gRPC call start as a full call, never in a
// slot: for tests that compare the two.
func WithoutFastPath() Option { return optionFunc(func(c *config) { c.noFastPath = true }) }
