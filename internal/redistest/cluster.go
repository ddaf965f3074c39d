package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/hourglass/hourglass/shared/redisguard"
)

// Cluster is a Redis Cluster of redis-server processes owned by a test:
// masters, optionally with replicas, each node on its own loopback port and in
// its own directory. Every client it hands out (and every client given to
// Watch) is guarded against cross-slot commands; a test that sent one fails
// when it ends.
type Cluster struct {
	t        testing.TB
	masters  int
	replicas int
	nodes    []*clusterNode
	guard    *SlotGuard
	// commands is the ElastiCache Serverless command guard of every client
	// the cluster hands out or watches; it must refuse nothing.
	commands *redisguard.Guard
}

// clusterNode is one redis-server of a Cluster.
type clusterNode struct {
	port int
	dir  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

type clusterOptions struct {
	replicas int
	args     []string
}

// ClusterOption configures StartCluster.
type ClusterOption func(*clusterOptions)

// WithReplicas gives every master n replicas (for failover tests).
func WithReplicas(n int) ClusterOption { return func(o *clusterOptions) { o.replicas = n } }

// WithClusterArgs passes further command-line arguments to every node.
func WithClusterArgs(args ...string) ClusterOption {
	return func(o *clusterOptions) { o.args = append(o.args, args...) }
}

// Timeouts of a cluster's start, generous for a loaded 2-core machine running
// tests under -race.
const (
	nodeStartTimeout = 20 * time.Second
	createTimeout    = 2 * time.Minute
	readyTimeout     = time.Minute
	clusterSlots     = 16384
)

// StartCluster spawns masters redis-server processes in cluster mode (plus
// their replicas, see WithReplicas), joins them into one cluster with
// redis-cli --cluster create and waits until every node agrees that all 16384
// slots are served. Everything stops with the test.
func StartCluster(t testing.TB, masters int, opts ...ClusterOption) *Cluster {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server is not installed (bash .ci/run installs it): %v", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: redis-cli is not installed (it comes with redis-server; bash .ci/run installs it): %v", err)
	}
	var o clusterOptions
	for _, opt := range opts {
		opt(&o)
	}
	if masters < 3 || o.replicas < 0 {
		t.Fatalf("redistest: a cluster needs at least 3 masters and no negative replica count, got %d masters, %d replicas", masters, o.replicas)
	}
	c := &Cluster{t: t, masters: masters, replicas: o.replicas, guard: &SlotGuard{},
		commands: redisguard.New(redisguard.ElastiCacheServerless, nil)}
	for range masters * (1 + o.replicas) {
		dir := t.TempDir()
		n, err := startNode(server, dir, o.args)
		if err != nil {
			t.Fatalf("redistest: cluster node did not start: %v", err)
		}
		t.Cleanup(n.kill) // before the TempDir cleanup removes its directory
		c.nodes = append(c.nodes, n)
	}
	if err := c.create(cli); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() {
		c.guard.check(t, "the cluster test")
		if n := c.commands.Refused(); n > 0 {
			t.Errorf("redistest: the cluster's clients sent %d commands ElastiCache Serverless does not serve (see the %q log lines)",
				n, redisguard.LogMessage)
		}
	})
	return c
}

// startNode starts one cluster node in dir on a free port pair, trying other
// ports when another process takes the chosen one first.
func startNode(bin, dir string, extra []string) (*clusterNode, error) {
	var lastErr error
	for range 20 {
		port, err := clusterPort()
		if err != nil {
			lastErr = err
			continue
		}
		n := &clusterNode{port: port, dir: dir}
		n.args = append([]string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + strconv.Itoa(port) + ".conf",
			"--cluster-node-timeout", "2000",
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no",
		}, extra...)
		if lastErr = n.spawn(bin); lastErr == nil {
			return n, nil
		}
	}
	return nil, lastErr
}

// clusterPort returns a port that, with its cluster bus port (+10000), is
// free now. Ports are drawn below the kernel's ephemeral range (32768 and up),
// so outgoing connections of other tests do not take them meanwhile.
func clusterPort() (int, error) {
	for range 100 {
		port := 12000 + rand.IntN(10000) // bus: 22000..31999
		if free(port) && free(port+10000) {
			return port, nil
		}
	}
	return 0, errors.New("no free port pair for a cluster node")
}

func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func (n *clusterNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// spawn starts the process and waits until it answers, making sure the answer
// comes from this process and not from another server that won the port.
func (n *clusterNode) spawn(bin string) error {
	cmd := exec.Command(bin, n.args...)
	cmd.Dir = n.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(nodeStartTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited at start:\n%s", n.port, lastLines(string(log), 10))
		default:
		}
		pid, err := n.pid()
		switch {
		case err == nil && pid == cmd.Process.Pid:
			n.mu.Lock()
			n.cmd, n.exited = cmd, exited
			n.mu.Unlock()
			return nil
		case err == nil:
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("port %d is served by another redis-server (pid %d)", n.port, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server on port %d did not answer within %s", n.port, nodeStartTimeout)
}

// pid asks the server on the node's port for its process id.
func (n *clusterNode) pid() (int, error) {
	c := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	v, ok := infoField(info, "process_id")
	if !ok {
		return 0, errors.New("INFO server has no process_id")
	}
	return strconv.Atoi(v)
}

// kill stops the node with SIGKILL and reaps it; a no-op when it is not
// running.
func (n *clusterNode) kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

func (n *clusterNode) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// create joins the nodes into a cluster and waits until it is ready. A create
// that fails midway is undone (every node reset) and tried once more.
func (c *Cluster) create(cli string) error {
	var err error
	for attempt := range 2 {
		if attempt > 0 {
			c.reset()
		}
		args := append([]string{"--cluster", "create"}, c.Addrs()...)
		args = append(args, "--cluster-replicas", strconv.Itoa(c.replicas), "--cluster-yes")
		ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
		out, cerr := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		cancel()
		if cerr != nil {
			err = fmt.Errorf("redis-cli --cluster create: %v\n%s", cerr, lastLines(string(out), 20))
			continue
		}
		if err = c.waitReady(readyTimeout); err == nil {
			return nil
		}
	}
	return err
}

// reset makes every node an empty, lone node again.
func (c *Cluster) reset() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		rc := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
		_ = rc.FlushAll(ctx).Err() // a replica refuses; it has no data of its own
		_ = rc.ClusterResetHard(ctx).Err()
		_ = rc.Close()
	}
}

// waitReady waits until every running node reports cluster_state:ok, knows
// every node, and sees all slots served by the expected masters with their
// replicas, and every replica's link to its master is up.
func (c *Cluster) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = c.ready(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("cluster not ready after %s: %v", timeout, err)
}

func (c *Cluster) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var layout string
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
		err := c.nodeReady(ctx, rc, n, &layout)
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", n.addr(), err)
		}
	}
	return nil
}

// nodeReady checks one node; layout is the slot map the nodes seen so far
// agree on.
func (c *Cluster) nodeReady(ctx context.Context, rc *redis.Client, n *clusterNode, layout *string) error {
	info, err := rc.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	want := map[string]string{
		"cluster_state": "ok", "cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_slots_ok": strconv.Itoa(clusterSlots), "cluster_known_nodes": strconv.Itoa(len(c.nodes)),
	}
	for k, v := range want {
		if got, _ := infoField(info, k); got != v {
			return fmt.Errorf("CLUSTER INFO %s:%s, want %s", k, got, v)
		}
	}
	slots, err := rc.ClusterSlots(ctx).Result() //nolint:staticcheck // SA1019: go-redis's ClusterClient maps slots by CLUSTER SLOTS too
	if err != nil {
		return err
	}
	covered := 0
	masters := map[string]bool{}
	var b strings.Builder
	slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	for _, s := range slots {
		covered += s.End - s.Start + 1
		if len(s.Nodes) != 1+c.replicas {
			return fmt.Errorf("slots %d-%d have %d nodes, want %d", s.Start, s.End, len(s.Nodes), 1+c.replicas)
		}
		masters[s.Nodes[0].Addr] = true
		fmt.Fprintf(&b, "%d-%d:%s ", s.Start, s.End, s.Nodes[0].Addr)
	}
	if covered != clusterSlots || len(masters) != c.masters {
		return fmt.Errorf("CLUSTER SLOTS covers %d slots with %d masters, want %d with %d", covered, len(masters), clusterSlots, c.masters)
	}
	if *layout == "" {
		*layout = b.String()
	} else if *layout != b.String() {
		return fmt.Errorf("nodes disagree on the slot map: %q vs %q", *layout, b.String())
	}
	repl, err := rc.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if role, _ := infoField(repl, "role"); role == "slave" {
		if link, _ := infoField(repl, "master_link_status"); link != "up" {
			return fmt.Errorf("replica link to its master is %q", link)
		}
	}
	return nil
}

// Addrs returns host:port of every node, masters and replicas, in start order.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr()
	}
	return out
}

// Masters returns the addresses of the nodes serving slots now, sorted.
func (c *Cluster) Masters() []string {
	slots, err := c.slots()
	if err != nil {
		c.t.Errorf("redistest: CLUSTER SLOTS: %v", err)
		return nil
	}
	set := map[string]bool{}
	for _, s := range slots {
		set[s.Nodes[0].Addr] = true
	}
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// URL is the REDIS_URL of the cluster, as package redisconn reads it:
// redis://<first node>?cluster=true&addr=<other node>&...
func (c *Cluster) URL() string {
	addrs := c.Addrs()
	q := url.Values{"cluster": {"true"}}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	return "redis://" + addrs[0] + "?" + q.Encode()
}

// Client returns a cluster client (guarded, see Watch: a command
// ElastiCache Serverless does not serve is refused, and fails the test when
// it ends), closed with t. tune
// may change its options; by default it has a large pool and timeouts meant
// for a loaded test machine.
func (c *Cluster) Client(t testing.TB, tune ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	return c.client(t, true, tune)
}

// AdminClient is Client without the command guard (the cross-slot guard
// stays), for a test's own set-up and for sending, on purpose, what
// ElastiCache Serverless would refuse (ACL SETUSER, or a command an ACL
// test expects Redis to refuse).
func (c *Cluster) AdminClient(t testing.TB, tune ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	return c.client(t, false, tune)
}

func (c *Cluster) client(t testing.TB, guarded bool, tune []func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{
		Addrs: c.Addrs(), PoolSize: 64, DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: 5 * time.Second, PoolTimeout: 10 * time.Second, MaxRedirects: 8,
		// As package redisconn connects the functions: RESP2, no CLIENT
		// SETINFO, no CLIENT MAINT_NOTIFICATIONS (neither is served by
		// ElastiCache Serverless, and go-redis sends both by default).
		Protocol: 2, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	for _, f := range tune {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	if guarded {
		c.commands.Install(cc)
	}
	c.Watch(cc)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Watch installs the cluster's cross-slot guard on a client made elsewhere
// (app.Connect's, say; give it HOURGLASS_REDIS_COMMANDS=ServerlessCommands
// for the command guard).
func (c *Cluster) Watch(client interface{ AddHook(redis.Hook) }) { client.AddHook(c.guard) }

// AssertNoCrossSlot fails t if any watched client got a cross-slot refusal so
// far. The cluster checks this by itself when its test ends, too.
func (c *Cluster) AssertNoCrossSlot(t testing.TB) {
	t.Helper()
	c.guard.check(t, "so far")
}

// CrossSlotErrors returns what the cluster's guard recorded.
func (c *Cluster) CrossSlotErrors() []string { return c.guard.Errors() }

// MasterOf returns the address of the master serving key's hash slot (by
// CLUSTER KEYSLOT and CLUSTER SLOTS), or "" after reporting an error.
func (c *Cluster) MasterOf(key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: 2})
		var addr string
		addr, err = masterOf(ctx, rc, key)
		_ = rc.Close()
		if err == nil {
			return addr
		}
	}
	c.t.Errorf("redistest: master of %q: %v", key, err)
	return ""
}

func masterOf(ctx context.Context, rc *redis.Client, key string) (string, error) {
	slot, err := rc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	slots, err := rc.ClusterSlots(ctx).Result() //nolint:staticcheck // SA1019: go-redis's ClusterClient maps slots by CLUSTER SLOTS too
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d is not served", slot)
}

func (c *Cluster) slots() ([]redis.ClusterSlot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := errors.New("no node is running")
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: 2})
		var slots []redis.ClusterSlot
		slots, err = rc.ClusterSlots(ctx).Result() //nolint:staticcheck // SA1019: go-redis's ClusterClient maps slots by CLUSTER SLOTS too
		_ = rc.Close()
		if err == nil {
			return slots, nil
		}
	}
	return nil, err
}

func (c *Cluster) node(addr string) *clusterNode {
	for _, n := range c.nodes {
		if n.addr() == addr {
			return n
		}
	}
	c.t.Errorf("redistest: no cluster node %s", addr)
	return nil
}

// Kill stops the node at addr with SIGKILL, as a crash would. The rest of the
// cluster notices after the node timeout (2s) and fails over to a replica, if
// the node was a master with one.
func (c *Cluster) Kill(addr string) {
	if n := c.node(addr); n != nil {
		n.kill()
	}
}

// Restart starts a killed node again on its port and directory; it rejoins
// the cluster from its nodes file.
func (c *Cluster) Restart(addr string) {
	n := c.node(addr)
	if n == nil {
		return
	}
	n.kill()
	bin, _ := exec.LookPath("redis-server")
	var err error
	for range 50 { // the old socket may linger for a moment
		if err = n.spawn(bin); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Errorf("redistest: restart %s: %v", addr, err)
}

// SlotGuard is a go-redis hook that records every reply refusing a command,
// pipeline or transaction because its keys span hash slots: Redis's CROSSSLOT,
// go-redis's own CROSSSLOT for a cross-slot TxPipeline, and a script touching
// a key outside the slot of its declared KEYS. On a cluster each of those
// breaks SPEC.md's "one script, one slot" rule.
type SlotGuard struct {
	mu   sync.Mutex
	seen []string
}

var _ redis.Hook = (*SlotGuard)(nil)

// slotErrorMarks are the texts of cross-slot refusals.
var slotErrorMarks = []string{
	"CROSSSLOT",
	"hash to the same slot", // Redis 7 scripts: "...keys that do not hash to the same slot"
	"non local key",         // a script touching a key of another node
}

// IsSlotError reports whether err refuses a command for spanning hash slots.
func IsSlotError(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, m := range slotErrorMarks {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// DialHook implements redis.Hook.
func (g *SlotGuard) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (g *SlotGuard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if IsSlotError(err) || IsSlotError(cmd.Err()) {
			g.record(cmd, firstErr(err, cmd.Err()))
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook, for pipelines and transactions.
func (g *SlotGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		found := false
		for _, cmd := range cmds {
			if IsSlotError(cmd.Err()) {
				g.record(cmd, cmd.Err())
				found = true
			}
		}
		if !found && IsSlotError(err) {
			g.record(nil, err)
		}
		return err
	}
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (g *SlotGuard) record(cmd redis.Cmder, err error) {
	what := "pipeline"
	if cmd != nil {
		what = cmdText(cmd)
	}
	g.mu.Lock()
	g.seen = append(g.seen, what+": "+err.Error())
	g.mu.Unlock()
}

// cmdText shows a command with its arguments, shortened (a script's source
// would drown the message).
func cmdText(cmd redis.Cmder) string {
	var b strings.Builder
	for i, a := range cmd.Args() {
		if i > 0 {
			b.WriteByte(' ')
		}
		s := fmt.Sprint(a)
		if len(s) > 60 {
			s = s[:57] + "..."
		}
		b.WriteString(s)
		if b.Len() > 300 {
			b.WriteString(" ...")
			break
		}
	}
	return b.String()
}

// Errors returns the refusals recorded so far.
func (g *SlotGuard) Errors() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.seen)
}

// Assert fails t if the guard recorded any refusal.
func (g *SlotGuard) Assert(t testing.TB) {
	t.Helper()
	g.check(t, "so far")
}

func (g *SlotGuard) check(t testing.TB, when string) {
	t.Helper()
	seen := g.Errors()
	if len(seen) == 0 {
		return
	}
	shown := seen[:min(len(seen), 10)]
	t.Errorf("redistest: %d commands were refused for spanning hash slots (%s); every script, MULTI and multi-key command must stay on one slot:\n  %s",
		len(seen), when, strings.Join(shown, "\n  "))
}

func infoField(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
