package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeTimeout is the cluster-node-timeout of a Cluster's nodes: a master that stops
// answering for this long is marked failing, and its replica is promoted about a
// second later.
const NodeTimeout = 500 * time.Millisecond

// formTimeout bounds how long forming a Cluster, or a failover, may take before
// the test fails (a hang is a failure, not a figure).
const formTimeout = 60 * time.Second

// Cluster is a Redis Cluster of redis-server processes on loopback, formed with
// CLUSTER ADDSLOTSRANGE, MEET and REPLICATE: its masters share the 16384 slots in
// equal ranges, each with its replicas.
type Cluster struct {
	// Masters and Replicas are the nodes as formed; Replicas[i] replicate
	// Masters[i]. A failover changes the roles, not these slices.
	Masters  []*Server
	Replicas [][]*Server
	nodes    []*Server
	admin    map[*Server]*redis.Client // one connection per node, for the helpers
	ranges   [][2]int                  // Masters[i] holds slots ranges[i][0]..ranges[i][1]
	dirs     []string
}

// StartCluster starts a Cluster of masters masters with replicasPerMaster replicas
// each, waits until it serves every slot with every replica in sync, and stops it
// when tb ends. Without redis-server it fails tb, as [Start] does.
func StartCluster(tb testing.TB, masters, replicasPerMaster int) *Cluster {
	tb.Helper()
	c, err := RunCluster(masters, replicasPerMaster)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// RunCluster is StartCluster for a caller without a testing.TB; the caller stops
// the Cluster.
func RunCluster(masters, replicasPerMaster int) (*Cluster, error) {
	if masters < 1 || replicasPerMaster < 0 {
		return nil, fmt.Errorf("redistest: a cluster of %d masters with %d replicas each", masters, replicasPerMaster)
	}
	c := &Cluster{admin: map[*Server]*redis.Client{}, Replicas: make([][]*Server, masters)}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	for i := range masters * (1 + replicasPerMaster) {
		s, err := c.startNode()
		if err != nil {
			return nil, err
		}
		if i < masters {
			c.Masters = append(c.Masters, s)
		} else {
			m := (i - masters) % masters
			c.Replicas[m] = append(c.Replicas[m], s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// startNode starts one cluster-enabled redis-server, its cluster bus on a port of
// its own and its nodes.conf in a directory of its own.
func (c *Cluster) startNode() (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, err
	}
	c.dirs = append(c.dirs, dir)
	var s *Server
	for try := 0; s == nil; try++ {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err = run("", "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			// Its files in its own directory: a replica's full sync writes
			// dump.rdb, which a node started later in the same directory would
			// load, and claim the slots of its keys.
			"--dir", dir, "--cluster-config-file", dir+"/nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(NodeTimeout.Milliseconds(), 10),
			// A replica may always be promoted, however long its link has been
			// down: the tests choose when a replica falls behind.
			"--cluster-replica-validity-factor", "0",
			// A replica's first sync starts at once (the default waits 5 s for
			// more replicas to share one transfer).
			"--repl-diskless-sync-delay", "0")
		if err != nil && (!errors.Is(err, errPortTaken) || try == 4) {
			return nil, err
		}
	}
	c.nodes = append(c.nodes, s)
	c.admin[s] = redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	return s, nil
}

// form assigns the slots, introduces every node to the first, attaches the
// replicas, and waits until the cluster is whole.
func (c *Cluster) form(ctx context.Context) error {
	ids := map[*Server]string{}
	for _, s := range c.nodes {
		id, err := c.admin[s].ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", s.Addr, err)
		}
		ids[s] = id
	}
	n := len(c.Masters)
	for i, m := range c.Masters {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		c.ranges = append(c.ranges, [2]int{lo, hi})
		if err := c.admin[m].ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", m.Addr, err)
		}
	}
	first := c.nodes[0]
	for _, s := range c.nodes[1:] {
		// MEET ip port bus-port: the bus is not on port+10000.
		if err := c.admin[s].Do(ctx, "cluster", "meet", "127.0.0.1", first.port, c.busPort(ctx, first)).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET from %s: %w", s.Addr, err)
		}
	}
	if err := c.waitAll(ctx, "every node knows every other", c.knowsAll); err != nil {
		return err
	}
	for i, rs := range c.Replicas {
		for _, r := range rs {
			if err := c.admin[r].ClusterReplicate(ctx, ids[c.Masters[i]]).Err(); err != nil {
				return fmt.Errorf("CLUSTER REPLICATE on %s: %w", r.Addr, err)
			}
		}
	}
	return c.waitAll(ctx, "the cluster is ok, every replica attached and in sync", c.whole)
}

func (c *Cluster) busPort(ctx context.Context, s *Server) int {
	v, _ := c.admin[s].ConfigGet(ctx, "cluster-port").Result()
	p, _ := strconv.Atoi(v["cluster-port"])
	return p
}

// waitAll polls ok on every node (skipping none) until all hold, or ctx ends.
func (c *Cluster) waitAll(ctx context.Context, what string, ok func(context.Context, *Server) error) error {
	for {
		var err error
		for _, s := range c.nodes {
			if err = ok(ctx, s); err != nil {
				break
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waiting until %s: %w", what, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// knowsAll: s lists every node, none still in handshake.
func (c *Cluster) knowsAll(ctx context.Context, s *Server) error {
	out, err := c.admin[s].ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(c.nodes) || strings.Contains(out, "handshake") || strings.Contains(out, "noaddr") {
		return fmt.Errorf("%s knows %d of %d nodes", s.Addr, len(lines), len(c.nodes))
	}
	return nil
}

// whole: s sees the cluster ok with every replica in its place; a replica is in
// sync with its master, a master has every replica online.
func (c *Cluster) whole(ctx context.Context, s *Server) error {
	if err := c.clusterOK(ctx, s); err != nil {
		return err
	}
	nodes, err := c.admin[s].ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	if want := len(c.nodes) - len(c.Masters); strings.Count(nodes, "slave") != want {
		return fmt.Errorf("%s does not see %d replicas yet", s.Addr, want)
	}
	info, err := c.admin[s].Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if strings.Contains(info, "role:slave") {
		if !strings.Contains(info, "master_link_status:up") || !strings.Contains(info, "master_sync_in_progress:0") {
			return fmt.Errorf("replica %s is not in sync", s.Addr)
		}
		return nil
	}
	want := len(c.Replicas[0])
	if field(info, "connected_slaves") != strconv.Itoa(want) || strings.Count(info, "state=online") != want {
		return fmt.Errorf("master %s has not every replica online", s.Addr)
	}
	return nil
}

// clusterOK: s answers CLUSTER INFO with cluster_state:ok and every slot served.
func (c *Cluster) clusterOK(ctx context.Context, s *Server) error {
	info, err := c.admin[s].ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if field(info, "cluster_state") != "ok" || field(info, "cluster_slots_ok") != "16384" {
		return fmt.Errorf("%s: cluster_state:%s, cluster_slots_ok:%s", s.Addr, field(info, "cluster_state"), field(info, "cluster_slots_ok"))
	}
	return nil
}

// field reads name's value from an INFO-style "name:value" text.
func field(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Addrs returns every node's address (seeds for a redis.ClusterClient).
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		a[i] = s.Addr
	}
	return a
}

// MasterOf returns the index in Masters of the master that held slot when the
// Cluster was formed.
func (c *Cluster) MasterOf(slot int) int {
	for i, r := range c.ranges {
		if slot >= r[0] && slot <= r[1] {
			return i
		}
	}
	return -1
}

// Kill kills s with SIGKILL: it writes nothing more, to clients or replicas.
func (c *Cluster) Kill(s *Server) { s.Stop() }

// Pause stops s with SIGSTOP: it reads and answers nothing, on any connection,
// until Resume. (The kernel still accepts what is sent to it.)
func (c *Cluster) Pause(s *Server) error { return s.Pause() }

// Resume continues s after Pause.
func (c *Cluster) Resume(s *Server) error { return s.Resume() }

// Admin returns a client on s alone (one connection, no retries), for commands
// a test sends to one node, such as CLIENT KILL or INFO.
func (c *Cluster) Admin(s *Server) *redis.Client { return c.admin[s] }

// WaitFailover waits until every node still running sees the cluster ok (every
// slot served by a running master: a replica of the killed one was promoted), or
// fails tb after a minute.
func (c *Cluster) WaitFailover(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	if err := c.waitLive(ctx); err != nil {
		tb.Fatal(err)
	}
}

func (c *Cluster) waitLive(ctx context.Context) error {
	for {
		var err error
		for _, s := range c.nodes {
			if !s.running() {
				continue
			}
			if err = c.clusterOK(ctx, s); err != nil {
				break
			}
			if err = c.servedByLive(ctx, s); err != nil {
				break
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waiting for the failover: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// servedByLive: in s's CLUSTER SHARDS, every shard that holds slots has a master,
// and it is a running node.
func (c *Cluster) servedByLive(ctx context.Context, s *Server) error {
	shards, err := c.admin[s].ClusterShards(ctx).Result()
	if err != nil {
		return err
	}
	for _, sh := range shards {
		if len(sh.Slots) == 0 {
			continue
		}
		var master *redis.Node
		for i := range sh.Nodes {
			if sh.Nodes[i].Role == "master" {
				master = &sh.Nodes[i]
			}
		}
		if master == nil {
			return fmt.Errorf("%s: slots from %d have no master", s.Addr, sh.Slots[0].Start)
		}
		for _, n := range c.nodes {
			if n.port == int(master.Port) && !n.running() {
				return fmt.Errorf("%s: slots from %d still on the stopped %s", s.Addr, sh.Slots[0].Start, n.Addr)
			}
		}
	}
	return nil
}

// Stop kills every node and removes their files.
func (c *Cluster) Stop() {
	for _, s := range c.nodes {
		_ = s.signal(syscall.SIGCONT) // a paused process dies only once continued
		s.Stop()
	}
	for _, a := range c.admin {
		a.Close()
	}
	for _, d := range c.dirs {
		os.RemoveAll(d)
	}
	c.nodes, c.admin, c.dirs = nil, nil, nil
}

// WaitInSync waits until the replicas of every running master acknowledged all
// that master wrote (their offset equals master_repl_offset), or fails tb after a
// minute.
func (c *Cluster) WaitInSync(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	for _, m := range c.nodes {
		if !m.running() {
			continue
		}
		err := c.waitAll(ctx, "the replicas of "+m.Addr+" are in sync", func(ctx context.Context, s *Server) error {
			if s != m {
				return nil
			}
			return c.inSync(ctx, m)
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// inSync: every replica of m (if m is a master) is at m's replication offset.
func (c *Cluster) inSync(ctx context.Context, m *Server) error {
	info, err := c.admin[m].Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if field(info, "role") != "master" {
		return nil
	}
	offset := field(info, "master_repl_offset")
	for i := range 16 {
		line := field(info, "slave"+strconv.Itoa(i))
		if line == "" {
			break
		}
		if !strings.Contains(line, ",offset="+offset+",") {
			return fmt.Errorf("%s at offset %s, its replica: %s", m.Addr, offset, line)
		}
	}
	return nil
}

// Restart starts s again, on its port with its nodes.conf, and waits until the
// cluster is whole again: a master that was replaced by its replica in a failover
// comes back as that replica's replica. It fails tb after a minute.
func (c *Cluster) Restart(tb testing.TB, s *Server) {
	tb.Helper()
	s.Restart(tb)
	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	if err := c.waitAll(ctx, "the restarted "+s.Addr+" is back in the cluster", c.whole); err != nil {
		tb.Fatal(err)
	}
}
