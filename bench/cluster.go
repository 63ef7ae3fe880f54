package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A local cluster (fraudbench --nodes N): N fraudd processes on loopback
// on one etcd (cmd/fraudbench's, or an embedded member in node 1), one
// cluster name, one master secret and one admin token. The load goes to
// every node in turn, as a round-robin load balancer sends it; the report
// adds the per-node figures, the round trips to account owners per
// evaluation, and, with --kill-node-after, how the others weathered the
// loss of a node (SIGKILL; the load balancer stops sending to it at that
// instant): the node that owns the load's accounts, as far as the counts
// tell.

// ClusterRow is a cluster run's figures beside its Row.
type ClusterRow struct {
	Nodes []NodeRow `json:"nodes"`
	// OwnerCallsPerRequest are the round trips to account owners (a charge
	// or usage read at the owner) per answered request; LeaseCallsPerRequest
	// the allowance lease calls; LeasedShare the share of requests charged
	// from a lent slice, with no round trip.
	OwnerCallsPerRequest float64 `json:"owner_calls_per_request"`
	LeaseCallsPerRequest float64 `json:"lease_calls_per_request"`
	LeasedShare          float64 `json:"leased_share"`
	// LeasedRests are the leased evaluations whose device event and
	// history the owner completed (one round trip each, counted in
	// OwnerCallsPerRequest), per answered request.
	LeasedRestsPerRequest float64 `json:"leased_rests_per_request"`
	// MirroredPerRequest are the leased evaluations with an event stored
	// at the owner answered from the holder's mirror of the owner's
	// history (no round trip), per answered request.
	MirroredPerRequest float64 `json:"mirrored_per_request"`
	// PipeCallsPerFrame is how many calls to other members shared a frame
	// of their pipes (one long-lived stream per member), over every node;
	// 0 when no call went on a pipe.
	PipeCallsPerFrame float64 `json:"pipe_calls_per_frame"`
	// Failover is set when a node was killed during the window.
	Failover *Failover `json:"failover,omitempty"`
}

// NodeRow is one node's share of a cluster run.
type NodeRow struct {
	Node string `json:"node"`
	PID  int    `json:"pid"`
	// Requests and Failed are what the node answered: any status below
	// 500, and 5xx or no answer.
	Requests int64 `json:"requests"`
	Failed   int64 `json:"failed"`
	// ServerCPU is the node's CPU time per request it answered.
	ServerCPU     *float64 `json:"server_cpu_us_per_req"`
	ServerPeakRSS *float64 `json:"server_peak_rss_mb"`
	OwnerCalls    int64    `json:"owner_calls"`
	LeaseCalls    int64    `json:"lease_calls"`
	Leased        int64    `json:"leased_charges"`
	LeasedRests   int64    `json:"leased_rests"`
	Mirrored      int64    `json:"mirrored"`
	PipeCalls     int64    `json:"pipe_calls"`
	PipeFrames    int64    `json:"pipe_frames"`
	Killed        bool     `json:"killed,omitempty"`
}

// Failover is what the surviving nodes answered after one was killed.
type Failover struct {
	Node      string  `json:"node"`
	KilledAtS float64 `json:"killed_at_s"`
	LeaseTTLS float64 `json:"lease_ttl_s"`
	// WindowS is from the kill to the last failed answer of the surviving
	// nodes (0: none failed); Failed counts those failures.
	WindowS float64 `json:"window_s"`
	Failed  int64   `json:"failed"`
	// LostInFlight are the killed node's own failures: requests it had
	// taken when it died.
	LostInFlight int64 `json:"lost_in_flight"`
}

// clusterNode is one started node.
type clusterNode struct {
	id   string
	proc *Proc
}

// startCluster starts the nodes; s.srvURL and s.srvPID are the first's
// (set-up goes through it).
func (s *suite) startCluster(ctx context.Context) error {
	n := s.cfg.Nodes
	s.cfg.AdminToken = "bench_" + randomHex(16)
	secret := randomHex(32)
	name := "bench-" + randomHex(4)
	var etcdClient, etcdPeer string
	if len(s.cfg.EtcdEndpoints) == 0 {
		var err error
		if etcdClient, err = freeAddr(); err != nil {
			return err
		}
		if etcdPeer, err = freeAddr(); err != nil {
			return err
		}
	}
	for i := 1; i <= n; i++ {
		dir, err := os.MkdirTemp("", "fraudbench-node-")
		if err != nil {
			return err
		}
		s.cleanup = append(s.cleanup, func() { os.RemoveAll(dir) })
		grpcAddr, err := freeAddr()
		if err != nil {
			return err
		}
		id := "node" + strconv.Itoa(i)
		args := []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--admin-token", s.cfg.AdminToken,
			"--trusted-proxies", "127.0.0.0/8", "--log-level", "info", "--secret", secret,
			"--cluster-name", name, "--cluster-node-id", id, "--cluster-listen", grpcAddr, "--cluster-advertise", grpcAddr,
			"--cluster-lease-ttl", s.cfg.LeaseTTL.String()}
		switch {
		case len(s.cfg.EtcdEndpoints) > 0:
			args = append(args, "--cluster-etcd", strings.Join(s.cfg.EtcdEndpoints, ","))
		case i == 1:
			args = append(args, "--cluster-embedded-etcd", "--cluster-etcd-client-url", "http://"+etcdClient, "--cluster-etcd-peer-url", "http://"+etcdPeer)
		default:
			args = append(args, "--cluster-etcd", "http://"+etcdClient)
		}
		args = append(args, s.cfg.FrauddArgs...)
		s.logf("starting %s %s", s.cfg.Fraudd, strings.Join(redact(redact(args, s.cfg.AdminToken), secret), " "))
		p, err := StartProc(ctx, id, s.cfg.Fraudd, args, childEnv(s.cfg.Env))
		if err != nil {
			return err
		}
		s.cleanup = append(s.cleanup, func() {
			if err := p.Stop(); err != nil {
				s.logf("%v", err)
			}
		})
		if err := s.waitReady(ctx, p.URL()); err != nil {
			return err
		}
		s.nodes = append(s.nodes, clusterNode{id: id, proc: p})
	}
	s.srvURL, s.srvPID = s.nodes[0].proc.URL(), 0
	pids := make([]string, len(s.nodes))
	for i, nd := range s.nodes {
		pids[i] = strconv.Itoa(nd.proc.PID)
	}
	etcd := "etcd at " + strings.Join(s.cfg.EtcdEndpoints, ",")
	if len(s.cfg.EtcdEndpoints) == 0 {
		etcd = "node1 runs the embedded etcd member"
	}
	s.rep.Target = fmt.Sprintf("a local cluster of %d fraudd nodes started by fraudbench (%s, pids %s; %s; temp data dirs; --cluster-lease-ttl %v; load round-robin over the nodes)",
		n, s.cfg.Fraudd, strings.Join(pids, ", "), etcd, s.cfg.LeaseTTL)
	return nil
}

// freeAddr reserves a loopback port by listening and closing it.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// ownerCounts are a node's cluster counters from its /metrics.
type ownerCounts struct{ calls, leaseCalls, leased, rests, mirrored, pipeCalls, pipeFrames int64 }

// scrapeOwnerCounts reads the cluster counters from a node's /metrics.
func (s *suite) scrapeOwnerCounts(url string) (ownerCounts, error) {
	t, err := NewTarget(url, TargetOptions{Timeout: 5 * time.Second})
	if err != nil {
		return ownerCounts{}, err
	}
	defer t.CloseIdle()
	status, body, err := call(t, "GET", "/metrics", map[string]string{"Authorization": "Bearer " + s.cfg.AdminToken}, nil)
	if err != nil {
		return ownerCounts{}, err
	}
	if status != 200 {
		return ownerCounts{}, fmt.Errorf("%s/metrics: HTTP %d", url, status)
	}
	var c ownerCounts
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case `fraudd_cluster_owner_calls_total{kind="call"}`:
			c.calls = int64(v)
		case `fraudd_cluster_owner_calls_total{kind="lease"}`:
			c.leaseCalls = int64(v)
		case "fraudd_cluster_leased_charges_total":
			c.leased = int64(v)
		case "fraudd_cluster_leased_rests_total":
			c.rests = int64(v)
		case "fraudd_cluster_mirrored_evaluations_total":
			c.mirrored = int64(v)
		case "fraudd_cluster_pipe_calls_total":
			c.pipeCalls = int64(v)
		case "fraudd_cluster_pipe_frames_total":
			c.pipeFrames = int64(v)
		}
	}
	return c, sc.Err()
}

// measureCluster runs w over every node and builds the row's cluster
// figures: per node, and the failover when a node is killed.
func (s *suite) measureCluster(ctx context.Context, label string, w *Workload, rc RunConfig) (Measured, *ClusterRow, error) {
	// A node killed in an earlier run stays out.
	var nodes []clusterNode
	for _, nd := range s.nodes {
		if !nd.proc.Exited() {
			nodes = append(nodes, nd)
		}
	}
	urls := make([]string, len(nodes))
	for i, nd := range nodes {
		urls[i] = nd.proc.URL()
	}
	// Each node gets its share of the connections.
	t, err := NewTargets(urls, TargetOptions{Conns: max(rc.Conns/len(urls)+1, 1), Timeout: rc.Timeout})
	if err != nil {
		return Measured{}, nil, err
	}
	defer t.CloseIdle()
	live := func(i int) bool { return !nodes[i].proc.Exited() }
	// What the survivors failed before the kill is not the failover's.
	failedAtKill := make([]int64, len(nodes))
	// The counts at the window's start and end: the warm-up's are not the
	// window's.
	before, after := make([]ownerCounts, len(nodes)), make([]ownerCounts, len(nodes))
	servedAt := func(into [][2]int64) {
		for i := range nodes {
			into[i][0], into[i][1] = t.Served(i)
		}
	}
	served0, served1 := make([][2]int64, len(nodes)), make([][2]int64, len(nodes))
	var scrapeErr error
	scrape := func(into []ownerCounts) {
		for i := range nodes {
			if live(i) {
				c, err := s.scrapeOwnerCounts(urls[i])
				if err != nil && scrapeErr == nil {
					scrapeErr = err
				}
				into[i] = c
			}
		}
	}
	watches := make([]*CPUWatch, len(nodes))
	for i, nd := range nodes {
		watches[i] = &CPUWatch{PID: nd.proc.PID}
	}
	self := &CPUWatch{}
	killIdx := -1
	var killAt, start time.Time
	var lostBefore int64
	killed := make(chan struct{})
	rc.OnMeasureStart = func() {
		// The nodes' CPU from the window's first instant, as the driver
		// counts requests from it: the scrapes below take milliseconds.
		for i := range watches {
			if live(i) {
				watches[i].Start()
			}
		}
		self.Start()
		servedAt(served0)
		scrape(before)
		start = time.Now()
		if s.cfg.KillNodeAfter > 0 && len(nodes) > 1 {
			go func() {
				defer close(killed)
				select {
				case <-ctx.Done():
					return
				case <-time.After(s.cfg.KillNodeAfter):
				}
				i := s.victim(nodes, urls, before)
				watches[i].End()
				t.Drop(i)
				for j := range nodes {
					_, failedAtKill[j] = t.Served(j)
				}
				lostBefore = failedAtKill[i]
				killAt = time.Now()
				_ = nodes[i].proc.cmd.Process.Signal(syscall.SIGKILL)
				killIdx = i
				s.logf("%s: killed %s (pid %d) after %v", label, nodes[i].id, nodes[i].proc.PID, s.cfg.KillNodeAfter)
			}()
		} else {
			close(killed)
		}
	}
	rc.OnMeasureEnd = func() {
		self.End()
		for i := range watches {
			if live(i) {
				watches[i].End()
			}
		}
		servedAt(served1)
		scrape(after)
	}
	rc.Progress = func(p Progress) { s.logf("%s", FormatProgress(label, p)) }
	res, err := Run(ctx, t, w, rc)
	if err != nil {
		return Measured{}, nil, err
	}
	<-killed
	if scrapeErr != nil {
		return Measured{}, nil, scrapeErr
	}
	m := Measured{Result: res}
	cr := &ClusterRow{}
	var cpu time.Duration
	var peak uint64
	var calls, leaseCalls, leased, rests, mirrored, pipeCalls, pipeFrames int64
	for i, nd := range nodes {
		answered, failed := served1[i][0]-served0[i][0], served1[i][1]-served0[i][1]
		row := NodeRow{Node: nd.id, PID: nd.proc.PID, Requests: answered, Failed: failed, Killed: i == killIdx}
		if c, err := watches[i].CPU(); err == nil {
			cpu += c
			row.ServerCPU = perReq(c, answered)
			row.ServerPeakRSS = ptr(round(float64(watches[i].PeakRSSKB())/1024, 1))
			peak = max(peak, watches[i].PeakRSSKB())
		}
		if i != killIdx && live(i) {
			row.OwnerCalls, row.LeaseCalls, row.Leased = after[i].calls-before[i].calls, after[i].leaseCalls-before[i].leaseCalls, after[i].leased-before[i].leased
			row.LeasedRests = after[i].rests - before[i].rests
			row.Mirrored = after[i].mirrored - before[i].mirrored
			mirrored += row.Mirrored
			row.PipeCalls, row.PipeFrames = after[i].pipeCalls-before[i].pipeCalls, after[i].pipeFrames-before[i].pipeFrames
			calls, leaseCalls, leased, rests = calls+row.OwnerCalls, leaseCalls+row.LeaseCalls, leased+row.Leased, rests+row.LeasedRests
			pipeCalls, pipeFrames = pipeCalls+row.PipeCalls, pipeFrames+row.PipeFrames
		}
		cr.Nodes = append(cr.Nodes, row)
	}
	m.ServerCPU, m.HasCPU, m.ServerRSSKB = cpu, cpu > 0, peak
	if c, err := self.CPU(); err == nil {
		m.ClientCPU, m.HasClient = c, true
	}
	if res.Requests > 0 {
		n := float64(res.Requests)
		cr.OwnerCallsPerRequest = round(float64(calls)/n, 4)
		cr.LeaseCallsPerRequest = round(float64(leaseCalls)/n, 4)
		cr.LeasedShare = round(float64(leased)/n, 4)
		cr.LeasedRestsPerRequest = round(float64(rests)/n, 4)
		cr.MirroredPerRequest = round(float64(mirrored)/n, 4)
	}
	if pipeFrames > 0 {
		cr.PipeCallsPerFrame = round(float64(pipeCalls)/float64(pipeFrames), 2)
	}
	if killIdx >= 0 {
		f := &Failover{Node: nodes[killIdx].id, KilledAtS: round(killAt.Sub(start).Seconds(), 3), LeaseTTLS: s.cfg.LeaseTTL.Seconds()}
		_, lost := t.Served(killIdx)
		f.LostInFlight = lost - lostBefore
		for i := range nodes {
			if i != killIdx {
				_, failed := t.Served(i)
				f.Failed += failed - failedAtKill[i]
			}
		}
		// The window runs from the kill to the survivors' last failure.
		if last := t.LastFailure(); last.After(killAt) && f.Failed > 0 {
			f.WindowS = round(last.Sub(killAt).Seconds(), 3)
		}
		cr.Failover = f
	}
	return m, cr, nil
}

// victim picks the node to kill: the one that sent the fewest charges
// elsewhere since the window began (round trips to owners plus charges
// from lent slices) — the owner of most of the load's accounts, whose loss
// the others must take over. Node 1 is never picked when it runs the etcd
// member.
func (s *suite) victim(nodes []clusterNode, urls []string, before []ownerCounts) int {
	best, fewest := len(nodes)-1, int64(-1)
	for i := range nodes {
		if i == 0 && len(s.cfg.EtcdEndpoints) == 0 {
			continue
		}
		c, err := s.scrapeOwnerCounts(urls[i])
		if err != nil {
			continue
		}
		sent := c.calls - before[i].calls + c.leased - before[i].leased
		if fewest < 0 || sent < fewest {
			best, fewest = i, sent
		}
	}
	return best
}
