// Package dedupcmp measures package dedup: the cost a keyed request adds (no key,
// the first request, a replay) with the memory store and with Redis, in process and
// on loopback; the round trips to Redis per request; requests per second with 64
// callers on distinct keys; and the exactly-once harness under faults
// (cmd/dedupbench). Redis is a real redis-server started on a free port.
package dedupcmp
