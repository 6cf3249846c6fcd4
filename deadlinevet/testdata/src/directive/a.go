package directive

import "context"

func call(ctx context.Context) error { return nil }

// A malformed directive is reported, and accepts nothing.
func f(ctx context.Context) {
	// want +1 `//deadlinevet:detached needs a reason: say why this work may outlive its caller`
	//deadlinevet:detached
	_ = call(context.Background()) // want `context.Background\(\) where ctx is at hand`
	// want +1 `unknown directive //deadlinevet:detach: the one directive is //deadlinevet:detached <reason>`
	//deadlinevet:detach the cache
	_ = call(context.Background()) // want `context.Background\(\) where ctx is at hand`
	// want +1 `write //deadlinevet: with no space after the slashes`
	// deadlinevet:detached the cache
	_ = call(context.Background()) // want `context.Background\(\) where ctx is at hand`
	// want +1 `a //deadlinevet: directive is a line comment, not /\* \*/`
	/* deadlinevet:detached the cache */
	_ = call(context.Background()) // want `context.Background\(\) where ctx is at hand`
}

// A directive covers its own statement or the one below it, nothing further.
func g(ctx context.Context) {
	//deadlinevet:detached the warm-up is shared by every caller
	_ = call(context.Background())
	_ = call(context.Background()) // want `context.Background\(\) where ctx is at hand`
}
