package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/challenge"
	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/health"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/actors/traffic"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/cluster/embedetcd"
	"github.com/fraudd/fraudd/cluster/rpc"
	"github.com/fraudd/fraudd/cmd/fraudd/clusterserve"
	"github.com/fraudd/fraudd/fastapi"
	intelfeeds "github.com/fraudd/fraudd/intel/feeds"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/internal/accesstoken"
	"github.com/fraudd/fraudd/internal/backup"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/metrics"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// serveConfig is everything `fraudd serve` reads from flags and environment.
type serveConfig struct {
	// unknownEnv are FRAUDD_* variables that name no flag (logged as a
	// warning: most likely misspelt).
	unknownEnv []string
	// accessLog writes one line per request to stderr.
	accessLog bool
	// metricsAddr, when set, serves /metrics without auth on its own
	// listener (a scraper on a private network); the admin API's listener
	// serves it to the admin token either way.
	metricsAddr string

	addr       string
	dataDir    string
	adminToken string
	secret     string
	// secretRaw is --secret/FRAUDD_SECRET as given, before trimming: the
	// secret of a store an earlier build opened with the untrimmed value
	// (see loadMaster).
	secretRaw       string
	trustedProxies  []netip.Prefix
	testClock       bool
	logLevel        slog.Level
	edgeBlock       bool
	edgeBlockAgents []string
	mcpOrigins      []string
	smtpURL         string
	feedsRefresh    time.Duration
	debugAddr       string
	durability      storage.Durability
	syncInterval    time.Duration
	// adminAddr, when set, is the admin API's and the console's own
	// listener; the public one then serves neither.
	adminAddr string
	// allowPrivateWebhooks also accepts http:// and loopback or private
	// webhook receivers (development and tests).
	allowPrivateWebhooks bool
	// cluster holds the --cluster-* flags; cluster mode only when enabled.
	cluster clusterFlags
	// storeFS is the store's file system: tests put one whose writes fail
	// there (storage/storagetest.FailingWrites); nil is the OS's.
	storeFS vfs.FS
}

func parseServe(args []string, env envVars) (*serveConfig, error) {
	fs := flag.NewFlagSet("fraudd serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &serveConfig{logLevel: slog.LevelInfo, edgeBlock: true, edgeBlockAgents: fastapi.DefaultEdgeBlockAgents,
		durability: storage.Interval, syncInterval: storage.DefaultSyncInterval}
	c.addr = ":8080"
	fs.Var(hostPort{s: &c.addr, listen: true}, "addr", "listen address")
	c.dataDir = "./data"
	fs.Var(dirValue{&c.dataDir}, "data-dir", "data directory: Pebble store, secrets, refreshed feeds")
	fs.Var(tokenValue{&c.adminToken}, "admin-token", "operator API token, surrounding whitespace trimmed; generated into <data-dir>/admin-token when empty")
	fs.Var(secretValue{&c.secret, &c.secretRaw}, "secret", "master secret, surrounding whitespace trimmed; generated into <data-dir>/master-secret when empty")
	fs.Var((*prefixList)(&c.trustedProxies), "trusted-proxies", "comma-separated CIDRs whose X-Forwarded-For is believed")
	fs.BoolVar(&c.testClock, "test-clock", false, "enable POST /admin/v1/clock (tests only)")
	fs.Var(levelValue{&c.logLevel}, "log-level", "debug, info, warn or error")
	fs.BoolVar(&c.edgeBlock, "edge-block", true, "answer 403 'error code: 1010' to requests with no User-Agent or a bare library default")
	fs.Var(agentList{&c.edgeBlockAgents}, "edge-block-agents", "comma-separated User-Agent prefixes the edge block rejects")
	fs.Var(originList{&c.mcpOrigins}, "mcp-origins", "comma-separated browser origins (https://agent.example) allowed to call /mcp; requests without Origin always may")
	fs.Var(offDuration{&c.feedsRefresh}, "feeds-refresh", "download fresh feeds from upstream this often (1m or more) and swap them in without a pause; 0 = off")
	fs.Var(hostPort{s: &c.adminAddr, listen: true, optional: true}, "admin-addr", "serve the admin API and the console (/console) on this address only, e.g. 127.0.0.1:8081; empty: on --addr")
	fs.Var(hostPort{s: &c.debugAddr, listen: true, optional: true}, "debug-addr", "serve Go's pprof profiles on this address (e.g. 127.0.0.1:6060); off when empty")
	fs.Var(smtpValue{&c.smtpURL}, "smtp-url", "send mail through smtp://[user:pass@]host:port[?from=addr]; the outbox records either way")
	fs.Var(hostPort{s: &c.metricsAddr, listen: true, optional: true}, "metrics-addr", "also serve the Prometheus /metrics on this address without auth, e.g. 127.0.0.1:9464 (keep it on loopback or a private network); empty: /metrics only with the admin token")
	fs.BoolVar(&c.accessLog, "access-log", false, "log one structured line per request (method, path, status, bytes, µs, client, request id; never headers, bodies or query strings)")
	fs.BoolVar(&c.allowPrivateWebhooks, "allow-private-webhooks", false, "also accept http:// and loopback/private webhook receivers; for development and tests")
	fs.Var(durabilityValue{&c.durability}, "durability", "interval: a counted call is answered once counted in memory, and one group sync every --sync-interval commits and syncs it (a crash loses at most the last interval); strict: fsync before each answer")
	fs.Var(syncIntervalValue{&c.syncInterval}, "sync-interval", "period of the group sync, 1ms to 10s: the most a crash can lose in interval mode, and the bound for device history in either mode")
	addClusterFlags(fs, &c.cluster)
	if err := parseFlagsEnv(fs, args, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, helpError{fs}
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, unexpectedArg(fs, args)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := c.cluster.finish(given, c.dataDir, osHostname); err != nil {
		return nil, err
	}
	if err := checkListeners(c.listeners()); err != nil {
		return nil, err
	}
	c.unknownEnv = unknownEnv(fs, env, "FRAUDD_URL")
	return c, nil
}

// unexpectedArg reports the first argument the flags left over. A boolean
// flag takes no separate value, so `--edge-block false` turned the block on
// and left "false" over: reported bare ("unexpected argument \"false\"")
// it did not say that the flag before it had been read as true.
func unexpectedArg(fs *flag.FlagSet, args []string) error {
	extra := fs.Arg(0)
	if i := len(args) - fs.NArg() - 1; i >= 0 {
		name := strings.TrimLeft(args[i], "-")
		if f := fs.Lookup(name); f != nil && strings.HasPrefix(args[i], "-") && kindOf(f) == "bool" {
			if _, err := strconv.ParseBool(extra); err == nil {
				return fmt.Errorf("unexpected argument %q after %s, which takes no separate value: write %s=%s", extra, args[i], args[i], extra)
			}
		}
	}
	return fmt.Errorf("unexpected argument %q", extra)
}

// listener is one address serve listens on, with the flag that gives it.
type listener struct{ flag, addr string }

// listeners are every address this configuration listens on: --addr, the
// optional listeners that are on, and in cluster mode the node-to-node
// service and the embedded etcd member's client and peer URLs.
func (c *serveConfig) listeners() []listener {
	out := []listener{{"addr", c.addr}}
	for _, l := range []listener{{"admin-addr", c.adminAddr}, {"metrics-addr", c.metricsAddr}, {"debug-addr", c.debugAddr}} {
		if l.addr != "" {
			out = append(out, l)
		}
	}
	if c.cluster.enabled() {
		out = append(out, listener{"cluster-listen", c.cluster.listen})
	}
	if c.cluster.embedded {
		for _, l := range []listener{{"cluster-etcd-client-url", c.cluster.embedClientURL}, {"cluster-etcd-peer-url", c.cluster.embedPeerURL}} {
			if u, err := url.Parse(l.addr); err == nil {
				out = append(out, listener{l.flag, u.Host})
			}
		}
	}
	return out
}

// checkListeners refuses two listeners on one address. The second one's
// listen failed only once the store was open (in cluster mode after the
// node had joined and taken shards), on a line that named neither flag:
// "listen on :8080: bind: address already in use" sent the operator
// looking for another process holding the port. Port 0 (the kernel picks)
// never collides; a host name is left to the kernel, which may resolve it
// to any address.
func checkListeners(ls []listener) error {
	for i, a := range ls {
		for _, b := range ls[:i] {
			if sameListener(a.addr, b.addr) {
				return fmt.Errorf("--%s %s and --%s %s are the same address, which only one listener can take: give --%s another port", a.flag, a.addr, b.flag, b.addr, a.flag)
			}
		}
	}
	return nil
}

// sameListener says whether listening on a and b (host:port, checked by
// hostPort) surely collides: the same port, and the same host or one that
// covers the other's (an empty host or [::] takes every address, 0.0.0.0
// every IPv4 one).
func sameListener(a, b string) bool {
	ha, pa, erra := net.SplitHostPort(a)
	hb, pb, errb := net.SplitHostPort(b)
	if erra != nil || errb != nil {
		return false
	}
	na, erra := net.LookupPort("tcp", pa)
	nb, errb := net.LookupPort("tcp", pb)
	if erra != nil || errb != nil || na == 0 || na != nb {
		return false
	}
	if strings.EqualFold(ha, hb) {
		return true
	}
	return covers(ha, hb) || covers(hb, ha)
}

// covers says whether listening on host takes other's address too.
func covers(host, other string) bool {
	h, err := netip.ParseAddr(host)
	if host != "" && (err != nil || !h.IsUnspecified()) {
		return false
	}
	if host == "" || h.Is6() {
		return true // every address, IPv4 and IPv6 (a dual-stack socket)
	}
	o, err := netip.ParseAddr(other)
	return err == nil && o.Unmap().Is4()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func runServe(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseServe(args, osEnv())
	if err != nil {
		var h helpError
		if errors.As(err, &h) {
			fmt.Fprint(stdout, "usage: fraudd serve [flags]\n\nRuns the service. Every flag falls back to its FRAUDD_* environment variable.\n\nflags:\n")
			printFlags(stdout, h.fs, true)
			return 0
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "fraudd serve: %s\n", line)
		}
		fmt.Fprintln(stderr, "Run 'fraudd serve -h' for the flags and their forms.")
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	slog.SetDefault(log)
	for _, k := range cfg.unknownEnv {
		log.Warn("ignoring an environment variable that names no flag of fraudd serve (misspelt?)", "var", k)
	}
	// A log reader that went away (`fraudd serve 2>&1 | tee log` after
	// Ctrl-C, a dead log shipper) makes the next log line a write to a
	// broken pipe on stderr, which Go's default answers by killing the
	// process: no last group commit, no store close, the counts answered
	// since the last sync lost. Ignored, the write fails and the stop goes
	// on. SIGHUP (the terminal or SSH session of `fraudd serve &` gone)
	// killed it the same way; it stops the service as SIGTERM does. README:
	// only SIGKILL skips the store's close.
	signal.Ignore(syscall.SIGPIPE)
	ctx, hurry, release := stopSignals(log, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer release()
	return exitCode(log, serve(ctx, hurry, cfg, log))
}

// stopSignals turns sigs into a stop's two steps. The first ends ctx: the
// graceful stop. The second closes hurry, which ends the drain of requests
// at once (operators press Ctrl-C twice to hurry a stop); the actors' last
// group commits and the store's close still run, so a hurried stop loses
// nothing that was answered. Later signals are ignored for the same reason:
// only a SIGKILL skips the store's close (and a stop stuck there is what a
// supervisor's kill is for). release stops listening.
func stopSignals(log *slog.Logger, sigs ...os.Signal) (ctx context.Context, hurry <-chan struct{}, release func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	ctx, stop := context.WithCancel(context.Background())
	hurried := make(chan struct{})
	done := make(chan struct{})
	go func() {
		for n := 0; ; n++ {
			var sig os.Signal
			select {
			case sig = <-ch:
			case <-done:
				return
			}
			switch n {
			case 0:
				stop()
			case 1:
				log.Warn("second signal: hurrying the stop, no longer waiting for requests in flight; the actors' last commits and the store's close still run", "signal", sig.String())
				close(hurried)
			default:
				log.Info("signal ignored: the stop is closing the store, which no signal skips", "signal", sig.String())
			}
		}
	}()
	return ctx, hurried, func() {
		signal.Stop(ch)
		close(done)
		stop()
	}
}

// exitCode is serve's exit code: 0 when it started and stopped cleanly, 1
// with one ERROR line naming the cause when the start failed or the stop
// could not persist everything (a supervisor must not take that stop for a
// clean one).
func exitCode(log *slog.Logger, err error) int {
	if err == nil {
		return 0
	}
	if path, ok := storage.CorruptFile(err); ok {
		log.Error("fraudd stopped: a store file is corrupt; restore the data directory from a backup (README: Backups)", "file", path, "err", err)
		return 1
	}
	log.Error("fraudd stopped with an error", "err", err)
	return 1
}

// serve starts everything in order, serves until ctx ends, then stops in
// reverse: stop accepting and drain requests, stop actors, close Pebble. A
// store whose close fails (its last group commits or sync, or the closing
// flush, could not be written) fails the stop: err is set to that failure
// unless serve already ended on another.
//
// hurry closing (a second signal) ends the drain of requests early; the
// rest of the stop runs as it would.
func serve(ctx context.Context, hurry <-chan struct{}, cfg *serveConfig, log *slog.Logger) (err error) {
	if err := secureDataDir(cfg.dataDir, log); err != nil {
		return err
	}
	unlock, err := lockDataDir(cfg.dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := backup.CheckFinished(cfg.dataDir); err != nil {
		return err
	}
	if err := nestedDataDir(cfg.dataDir); err != nil {
		return err
	}
	adminToken, err := loadAdminToken(cfg, log)
	if err != nil {
		return err
	}
	var clk clock.Clock = clock.Real{}
	var testClock *clock.Offset
	if cfg.testClock {
		testClock = clock.NewOffset()
		clk = testClock
		log.Warn("test clock enabled: POST /admin/v1/clock moves time; never use this in production")
	}

	if err := storeLost(cfg); err != nil {
		return err
	}
	db, err := storage.Open(filepath.Join(cfg.dataDir, "pebble"), storage.Options{FS: cfg.storeFS, Logger: log,
		Durability: cfg.durability, SyncInterval: cfg.syncInterval,
		StampFile: filepath.Join(cfg.dataDir, storage.StampFileName)})
	if err != nil {
		return err
	}
	if err := db.VerifyTables(); err != nil {
		_ = db.Close()
		return err
	}
	log.Info("storage durability", "mode", cfg.durability.String(), "sync_interval", cfg.syncInterval.String())
	// started is set once the store serves (db.Serving). A start that
	// fails before reports its failure in its one ERROR line, which names
	// the cause (a store a full disk broke says so); the close of that
	// store then only warns. After it, a failed close is what serve
	// returns, and so the one ERROR line of a stop that lost writes.
	started := false
	defer func() {
		cerr := db.Close()
		switch {
		case cerr == nil:
			log.Info("storage closed")
		case !started:
			log.Warn("close storage after the failed start", "err", cerr)
		case err == nil:
			err = fmt.Errorf("close storage: what was acknowledged last may not be on disk: %w", cerr)
		default:
			log.Error("close storage", "err", cerr)
		}
	}()
	// The secret is checked against the store before anything uses it: a
	// lost or different secret would turn every key into a 401 and every
	// sealed value into garbage while status still said operational.
	master, err := loadMaster(cfg, log, db)
	if err != nil {
		return err
	}
	if err := db.Probe(); err != nil {
		return fmt.Errorf("storage probe: %w", err)
	}
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	// leave, in cluster mode, hands this node's shards over and revokes its
	// lease once the HTTP server drained, by the deadline given.
	leave := func(time.Time) {}
	// stop is the plan of the shutdown, set when it begins: the deferred
	// stops below keep to it too (zero: serve ended on an error).
	var stop shutdownPlan
	// stopFailed collects the actor services whose stop failed (a shard
	// still running at the deadline, its last commits not written): the
	// stop then did not persist everything, and its exit code says so.
	// Deferred before them, this runs after every one of them.
	var stopFailed []error
	defer func() {
		if err == nil && len(stopFailed) > 0 {
			err = fmt.Errorf("stop: what was acknowledged last may not be on disk: %w", errors.Join(stopFailed...))
		}
	}()

	system := actor.NewActorSystem(actor.WithLoggerFactory(func(s *actor.ActorSystem) *slog.Logger {
		return log.With("lib", "protoactor")
	}))
	defer func() {
		system.Shutdown()
		log.Info("actor system stopped")
	}()
	// Cluster mode: join before anything serves, and keep the accounts
	// actor a copy of the cluster's configuration. Single-node mode starts
	// none of it.
	var node *clusterserve.Node
	var shared *clusterserve.ConfigSync
	acctsCfg := accounts.Config{DB: db, Master: master, Clock: clk, Logger: log}
	if cfg.cluster.enabled() {
		ccfg := clusterConfig(cfg, log)
		ccfg.KeyCheck = master.KeyCheck()
		if node, err = clusterserve.Start(ctx, ccfg); err != nil {
			return err
		}
		left := false
		defer func() {
			if !left {
				node.CloseBy(stop.end)
			}
		}()
		leave = func(by time.Time) {
			left = true
			lctx, cancel := context.WithDeadline(context.Background(), by)
			defer cancel()
			if err := node.Leave(lctx); err != nil {
				log.Error("leave the cluster", "err", err)
				return
			}
			log.Info("left the cluster")
		}
		if shared, err = node.NewConfigSync(); err != nil {
			return err
		}
		acctsCfg.Shared = shared
	}
	accts, err := accounts.Start(system.Root, acctsCfg)
	if err != nil {
		return err
	}
	defer stopActors(log, "accounts actor", accts, &stop.end, &stopFailed)
	if shared != nil {
		if err := shared.Start(ctx, accts); err != nil {
			return err
		}
	}
	// In cluster mode the limiters keep their counts for the address
	// shards' owners, who sum every node's (cluster/rpc.AddrReporter).
	limits := iplimit.New(system.Root, iplimit.Config{Clock: clk, Shared: node != nil})
	defer stopActors(log, "per-address limiters", limits, &stop.end, &stopFailed)
	mail, err := mailer.New(system.Root, mailer.Config{DB: db, Accounts: accts, SMTPURL: cfg.smtpURL, Clock: clk, Logger: log})
	if err != nil {
		return err
	}
	defer stopActors(log, "mailer", mail, &stop.end, &stopFailed)
	// In cluster mode the quota actors keep this node's share of each
	// count and load the sum of every member's (cluster/rpc.SharedStore).
	var quotaStore quota.Store = db
	var sharedQuota *rpc.SharedStore
	if node != nil {
		sharedQuota = node.QuotaStore(db)
		quotaStore = sharedQuota
	}
	quotas := quota.New(system.Root, quota.Config{Store: quotaStore, Clock: clk, Logger: log, Notifier: mail})
	// Deferred after the limiters, so it runs before them: the quota shards
	// flush their last group commit while Pebble is still open.
	defer stopActors(log, "quota actors", quotas, &stop.end, &stopFailed)
	counts, err := traffic.New(system.Root, traffic.Config{Store: db, Clock: clk, Logger: log})
	if err != nil {
		return err
	}
	defer stopActors(log, "traffic counter", counts, &stop.end, &stopFailed)
	// Device events (browser collector); stopped before Pebble closes so
	// its last group commit lands. In cluster mode the ids it mints name
	// this node, so that another node can resolve them here, and it keeps
	// the ids of the newest it stored for lease holders' first watches.
	devices := events.New(system.Root, events.Config{Store: db, Clock: clk, Logger: log, Node: eventRoute(node), KeepRecent: keepRecentEvents(node)})
	defer stopActors(log, "device actors", devices, &stop.end, &stopFailed)
	// Per-customer device history and account links; stopped before Pebble
	// closes so its last group commit lands.
	devHist, err := devicehist.New(system.Root, devicehist.Config{Store: db, Secret: master, Clock: clk, Logger: log})
	if err != nil {
		return err
	}
	defer stopActors(log, "device-history actors", devHist, &stop.end, &stopFailed)
	if node != nil {
		// The node-to-node service and the routing clients; stopped before
		// the quota, device and history actors and the traffic counter
		// (deferred after them).
		stopRPC, err := node.StartRPC(clusterserve.LocalParts{Quota: quotas, Devices: devices, History: devHist, Store: db, Shared: sharedQuota,
			Traffic: counts, Limits: limits, Now: clk.Now, Timeout: rpc.DefaultTimeout})
		if err != nil {
			return err
		}
		defer func() { stopRPC(stop.rpc) }()
	}

	// Device-evidence beta (challenges, GPU samples, consistency hashes);
	// GPU samples are stored sealed; challenges and consistency hashes are
	// memory only (a restart expires every challenge). Stopped before Pebble
	// closes.
	challenges := challenge.New(system.Root, challenge.Config{Key: master.Derive(secrets.LabelDeviceEvidence), Store: db, Clock: clk, Logger: log})
	defer stopActors(log, "device-evidence actors", challenges, &stop.rpc, &stopFailed)

	// Webhook shards stop before the mailer and storage they use (defers run
	// in reverse). Pending deliveries are kept in the store and resumed here
	// on their schedule, so a restart between a failed attempt and its retry
	// loses nothing (an interrupted attempt is made again).
	hooks, err := webhook.New(system.Root, webhook.Config{Accounts: accts, DB: db, Mail: mail, Clock: clk, Logger: log,
		AllowPrivate: cfg.allowPrivateWebhooks, UserAgent: "fraudd-webhooks/" + version})
	if err != nil {
		return err
	}
	defer stopActors(log, "webhook actors", hooks, &stop.rpc, &stopFailed)
	if cfg.allowPrivateWebhooks {
		log.Warn("private webhook receivers allowed: http:// and loopback/private addresses are accepted; never use this in production")
	}

	loadStart := time.Now()
	snap, err := netlists.LoadDir(cfg.dataDir)
	if err != nil {
		return fmt.Errorf("load feeds: %w", err)
	}
	feeds := netlists.NewStore(snap)
	if cfg.feedsRefresh > 0 {
		refresher := &intelfeeds.Refresher{Interval: cfg.feedsRefresh, DataDir: cfg.dataDir, Store: feeds, Logger: log}
		go func() { _ = refresher.Run(probeCtx) }()
		log.Info("feeds refresh enabled", "every", cfg.feedsRefresh)
	}
	cov := snap.Coverage()
	log.Info("feeds loaded", "took", time.Since(loadStart).Round(time.Millisecond),
		"tor_exits", cov.TorExits, "dc_ranges", cov.DCRanges, "cloud_providers", cov.CloudProviders, "disposable_domains", cov.DisposableDomains)

	down := actors.SupervisionOf(system).Down
	if node != nil {
		// A lost membership lease degrades the API in /api/status.
		// So does another member's trouble, or its silence (node.Down);
		// the others hear this node's own list only.
		supervised := down
		down = func() []string { return append(supervised(), node.Down()...) }
		node.SetLocalDown(func() []string { return append(supervised(), node.OwnDown()...) })
	}
	// The health monitor re-checks the store on a tick, so an unreadable disk
	// turns into 503s (and a recovered one back into service) without waiting
	// for a failed request, and keeps the status history.
	// A shard its supervisor stopped after repeated panics is restarted by
	// itself; until then /api/status reports the API degraded.
	monitor, err := health.New(system.Root, health.Config{DB: db, Clock: clk, Logger: log, Checks: health.Checks{
		Storage: db.Probe,
		Feeds:   func() bool { return feeds.Current().Coverage().TorExits > 0 },
		Actors:  down,
	}})
	if err != nil {
		return err
	}
	// Once the monitor stopped, nothing reopens a store a failed write
	// broke: what fails from then on (the actors' last group commits, the
	// store's close) is the stop's failure, reported in its one ERROR line.
	defer db.Stopping()
	defer stopActors(log, "health monitor", monitor, &stop.rpc, &stopFailed)

	// Each account's recent evaluations for the console; its last batch is
	// written before Pebble closes.
	recents, err := recent.New(system.Root, recent.Config{Store: db, Clock: clk, Logger: log})
	if err != nil {
		return err
	}
	defer stopActors(log, "recent-evaluations actor", recents, &stop.rpc, &stopFailed)
	if node != nil {
		// The other members' list calls read this node's own lists.
		if err := node.ServeLists(rpc.LocalLists{Evaluations: recents, Deliveries: hooks, Mail: mail}); err != nil {
			return err
		}
	}

	var accessLog *slog.Logger
	if cfg.accessLog {
		// Its own handler at info, so --log-level does not silence it.
		accessLog = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("log", "access")
	}
	// Metrics: the request path records into mx; everything else is read
	// when Prometheus scrapes.
	mx := metrics.New(version)
	sources := metricSources{kinds: actors.KindsOf(system), db: db, quota: quotas, events: devices, history: devHist,
		hooks: hooks, feeds: feeds, clock: clk}
	if node != nil {
		sources.cluster = node
	}
	if err := addSources(mx, sources); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	srv := fastapi.New(fastapi.Config{
		Metrics:         mx,
		AccessLog:       accessLog,
		AdminToken:      adminToken,
		TrustedProxies:  cfg.trustedProxies,
		EdgeBlock:       cfg.edgeBlock,
		EdgeBlockAgents: cfg.edgeBlockAgents,
		MCPOrigins:      cfg.mcpOrigins,
		Version:         version,
		StartedAt:       clk.Now(),
		Logger:          log,
		AdminSeparate:   cfg.adminAddr != "",
	}, fastapi.Deps{Accounts: accts, Store: db, Clock: clk, TestClock: testClock, Limits: limits, Quota: quotas, Feeds: feeds, Mail: mail, Traffic: counts,
		Tokens: accesstoken.NewIssuer(master), Health: monitor, Webhooks: hooks,
		NetTokens: nettoken.New(master.Derive(secrets.LabelNetworkToken)), Devices: devices, VisitorKey: master.Derive(secrets.LabelVisitorID),
		DeviceHist: devHist, Challenges: challenges, Recent: recents, Shards: actors.KindsOf(system), ChargeQuota: chargeQuota(node), ClusterEvents: clusterEvents(node), DeviceList: clusterDevices(node),
		TrafficFeed: trafficFeed(node), EvaluationList: clusterEvaluations(node), DeliveryList: clusterDeliveries(node), MailList: clusterMail(node),
		Backup: func(dir string) (*backup.Report, error) {
			return backup.Write(backup.Source{DataDir: cfg.dataDir, Store: db, SecretOutside: cfg.secret != ""}, dir)
		}})

	if cfg.debugAddr != "" {
		debugSrv, err := startDebug(cfg.debugAddr, db, log)
		if err != nil {
			return err
		}
		defer debugSrv.Close()
	}

	// The admin listener comes first, so that once "fraudd listening" is
	// logged every listener is up.
	var adminLn net.Listener
	if cfg.adminAddr != "" {
		if adminLn, err = net.Listen("tcp", cfg.adminAddr); err != nil {
			return fmt.Errorf("listen on --admin-addr %s: %w", cfg.adminAddr, err)
		}
		log.Info("fraudd admin listening", "addr", adminLn.Addr().String(), "console", "/console")
	}
	var metricsSrv *http.Server
	if cfg.metricsAddr != "" {
		if metricsSrv, err = startMetrics(cfg.metricsAddr, mx, log); err != nil {
			if adminLn != nil {
				adminLn.Close()
			}
			return err
		}
		defer metricsSrv.Close()
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		if adminLn != nil {
			adminLn.Close()
		}
		return fmt.Errorf("listen on --addr %s: %w", cfg.addr, err)
	}
	db.Serving()
	started = true
	// procs is GOMAXPROCS: the cores Go runs fraudd's goroutines on (the
	// README's "Cores" says when fewer pay).
	log.Info("fraudd listening", "addr", ln.Addr().String(), "url", listenURL(ln.Addr()), "version", version, "data_dir", cfg.dataDir, "procs", runtime.GOMAXPROCS(0))
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	if adminLn != nil {
		go func() { served <- srv.ServeAdmin(adminLn) }()
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop = planShutdown(time.Now())
	log.Info("shutting down: draining requests", "grace", shutdownGrace.String())
	shutCtx, cancel := context.WithDeadline(context.Background(), stop.drain)
	defer cancel()
	go func() {
		select {
		case <-hurry:
			cancel() // stopSignals logged it
		case <-shutCtx.Done():
		}
	}()
	if err := srv.Shutdown(shutCtx); err != nil && !closed(hurry) {
		log.Error("drain requests cut short by the shutdown grace", "err", err)
	}
	log.Info("http server stopped")
	leave(stop.leaveBy(time.Now()))
	return nil
}

// closed reports whether c is closed.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// actorService is an actor service's stop keeping to a deadline (zero: no
// deadline, each waits actors.StopTimeout for its shards at most).
type actorService interface{ StopBy(by time.Time) error }

// stopActors stops s by *by, a deadline of the plan read when it runs (a
// deferred call's arguments are evaluated when deferred, before the plan
// is set): the plan's rpc for the services stopped before the node-to-node
// service, its end for those after it, so that the quota, device and
// history actors and the traffic counter keep the last second. The
// services stop one after the other, and stuck shards in each would
// otherwise take actors.StopTimeout apiece past the supervisor's grace.
// Each still makes its last group commit before it returns, ahead of the
// store's close; what the deadline cut short is logged.
func stopActors(log *slog.Logger, what string, s actorService, by *time.Time, failed *[]error) {
	if err := s.StopBy(*by); err != nil {
		log.Error("stop "+what, "err", err)
		*failed = append(*failed, fmt.Errorf("stop %s: %w", what, err))
	}
}

// shutdownGrace bounds a stop, from the signal to the store's close: a
// supervisor kills the process after its own grace period (30 s: compose's
// stop_grace_period here, Kubernetes' default), and a kill mid-way through
// a cluster leave or the last group commits costs more than a step cut
// short on purpose. The rest of the 30 s is margin.
const shutdownGrace = 27 * time.Second

// The steps' shares of the grace: the HTTP drain at most drainMax, the
// cluster leave at most leaveMax and never past what the node-to-node
// service's stop and the actors' last commits need after it (stopReserve),
// the service's graceful stop never past the last second, which is the
// actors' and the store's.
const (
	drainMax    = 15 * time.Second
	leaveMax    = 10 * time.Second
	stopReserve = 4 * time.Second
	closeAfter  = time.Second
)

// shutdownPlan is when each step of a stop must end.
type shutdownPlan struct {
	// drain ends the HTTP drain, leave the cluster leave (or earlier: at
	// most leaveMax after it starts; its embedded etcd member's close
	// included), rpc the node-to-node service's graceful stop and the
	// actor services stopped before it; end the actor services stopped
	// after it (stopActors), and the embedded etcd member's close when no
	// leave ran. Only the last group commits, their syncs and the store's
	// close run past end: they are what the grace is for.
	drain, leave, rpc, end time.Time
}

// planShutdown is the plan of a stop that begins at start.
func planShutdown(start time.Time) shutdownPlan {
	end := start.Add(shutdownGrace)
	return shutdownPlan{
		drain: start.Add(drainMax),
		leave: end.Add(-stopReserve),
		rpc:   end.Add(-closeAfter),
		end:   end,
	}
}

// leaveBy is the cluster leave's deadline when it starts at now: leaveMax
// later, or the plan's leave when that comes first.
func (p shutdownPlan) leaveBy(now time.Time) time.Time {
	if by := now.Add(leaveMax); by.Before(p.leave) {
		return by
	}
	return p.leave
}

// clusterConfig is the cluster start's configuration from the flags.
func clusterConfig(cfg *serveConfig, log *slog.Logger) clusterserve.Config {
	c := cfg.cluster
	out := clusterserve.Config{Name: c.name, Endpoints: c.etcd, CA: c.etcdCA, Cert: c.etcdCert, Key: c.etcdKey,
		NodeID: c.nodeID, Listen: c.listen, Advertise: c.advertise, LeaseTTL: c.leaseTTL, LeaseAfter: c.leaseAfter,
		LeaseFile: filepath.Join(cfg.dataDir, "cluster-lease"), StampFile: filepath.Join(cfg.dataDir, "cluster-node"), Logger: log}
	if c.embedded {
		out.Embedded = &embedetcd.Config{Dir: c.embedDir, Name: c.embedName, ClientURL: c.embedClientURL,
			PeerURL: c.embedPeerURL, InitialCluster: c.initial, Join: c.join}
	}
	return out
}

// chargeQuota is the seam where cluster mode's routing quota client
// replaces the local one in the checks pipeline (nil: the local one).
func chargeQuota(node *clusterserve.Node) checks.Quota {
	if node == nil || node.Parts.Quota == nil {
		return nil
	}
	return node.Parts.Quota
}

// keepRecentEvents is how many of the newest device events a cluster node
// keeps the ids of (events.Config.KeepRecent): 65,536, about 2.6 MB; none
// on a single node.
func keepRecentEvents(node *clusterserve.Node) int {
	if node == nil {
		return 0
	}
	return 1 << 16
}

// eventRoute is this node's route in the device-event ids it mints (0 in
// single-node mode: none).
func eventRoute(node *clusterserve.Node) uint16 {
	if node == nil {
		return 0
	}
	return node.EventRoute()
}

// clusterEvents is the seam where cluster mode's device-event client (it
// resolves an event at the node that stored it) replaces the local one in
// the checks pipeline (nil: the local one).
func clusterEvents(node *clusterserve.Node) checks.Events {
	if node == nil || node.Parts.Events == nil {
		return nil
	}
	return node.Parts.Events
}

// clusterDevices is the admin device list in cluster mode (read at each
// account's owner); nil in single-node mode (the local history's).
func clusterDevices(node *clusterserve.Node) fastapi.DeviceLister {
	if node == nil || node.Parts.Devices == nil {
		return nil
	}
	return node.Parts.Devices
}

// clusterEvaluations, clusterDeliveries and clusterMail are the admin
// lists of recent evaluations, webhook deliveries and the outbox in
// cluster mode (every member's, merged); nil in single-node mode (the
// node's own). Each returns an untyped nil, never a nil pointer in the
// interface, so that the handlers fall back to the local list.
func clusterEvaluations(node *clusterserve.Node) fastapi.EvaluationLister {
	if node == nil || node.Parts.Evaluations == nil {
		return nil
	}
	return node.Parts.Evaluations
}

func clusterDeliveries(node *clusterserve.Node) fastapi.DeliveryLister {
	if node == nil || node.Parts.Deliveries == nil {
		return nil
	}
	return node.Parts.Deliveries
}

func clusterMail(node *clusterserve.Node) fastapi.MailLister {
	if node == nil || node.Parts.Mail == nil {
		return nil
	}
	return node.Parts.Mail
}

// trafficFeed is the threat feed's counts in cluster mode (every member's,
// summed); nil in single-node mode (the local counter's).
func trafficFeed(node *clusterserve.Node) fastapi.FeedReader {
	if node == nil || node.Parts.Feed == nil {
		return nil
	}
	return node.Parts.Feed
}

// loadMaster returns the master secret from --secret, or from the data dir's
// master-secret file, creating it (0600) on the first start of an empty
// store. It refuses to go on when the file is gone but the store was written
// under a secret, or when the secret is not the one the store was written
// with.
func loadMaster(cfg *serveConfig, log *slog.Logger, db *storage.DB) (secrets.Master, error) {
	path := filepath.Join(cfg.dataDir, "master-secret")
	source := path
	var m secrets.Master
	if cfg.secret != "" {
		m, source = secrets.FromBytes([]byte(cfg.secret)), "--secret/FRAUDD_SECRET"
	} else {
		_, statErr := os.Stat(path)
		if errors.Is(statErr, fs.ErrNotExist) {
			written, err := storeWasWritten(db)
			if err != nil {
				return secrets.Master{}, err
			}
			if written {
				return secrets.Master{}, fmt.Errorf("master secret %s is missing but the store in %s was written with one: restore the file from a backup or pass the original with --secret/FRAUDD_SECRET (a new secret would lock out every key and lose every sealed value)", path, cfg.dataDir)
			}
		}
		// An empty file is a first start killed between creating the
		// file and writing it: nothing was sealed under it unless the
		// store says so.
		emptyOK := func() (bool, error) {
			written, err := storeWasWritten(db)
			return !written, err
		}
		b, created, err := readOrCreate(path, func() string { return secrets.RandomHex(32) }, emptyOK, log)
		if err != nil {
			return secrets.Master{}, fmt.Errorf("master secret: %w", err)
		}
		if created {
			log.Info("generated master secret", "path", path)
		}
		m = secrets.FromBytes(b)
	}
	err := db.VerifyKeyCheck(m.KeyCheck())
	if errors.Is(err, storage.ErrKeyCheckMismatch) && cfg.secretRaw != cfg.secret {
		// Earlier builds took --secret/FRAUDD_SECRET untrimmed, so a store
		// first started with a trailing newline in it (a secret mounted from
		// a file) was written under the newline: it opens with that value
		// still, rather than being refused after an upgrade.
		raw := secrets.FromBytes([]byte(cfg.secretRaw))
		if rerr := db.VerifyKeyCheck(raw.KeyCheck()); rerr == nil {
			log.Warn("the store was written with the master secret's surrounding whitespace, as earlier builds read --secret/FRAUDD_SECRET; keep passing the value as it is")
			m, err = raw, nil
		}
	}
	if err != nil {
		if errors.Is(err, storage.ErrKeyCheckMismatch) {
			return secrets.Master{}, fmt.Errorf("the master secret from %s is not the one the store in %s was written with: restore the original master-secret file or --secret/FRAUDD_SECRET value", source, cfg.dataDir)
		}
		return secrets.Master{}, fmt.Errorf("master secret key check: %w", err)
	}
	return m, nil
}

// storeLost refuses a data dir that was started before but whose store is
// gone: its master-secret file is there (the first start writes it only
// after it has opened the store) and its pebble directory is missing or
// empty. Opening would start an empty store under the old secret: every
// account, key and count lost while the service came up as if new.
func storeLost(cfg *serveConfig) error {
	if cfg.secret != "" {
		return nil // no file marks an earlier start; the key check guards the rest
	}
	secretPath := filepath.Join(cfg.dataDir, "master-secret")
	if _, err := os.Stat(secretPath); err != nil {
		return nil // a first start, or a lost secret (loadMaster refuses that)
	}
	store := filepath.Join(cfg.dataDir, "pebble")
	entries, err := os.ReadDir(store)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read store directory %s: %w", store, err)
	}
	if len(entries) > 0 {
		return nil
	}
	return fmt.Errorf("the store %s is missing or empty but %s is there, so this data dir was started before: restore the data dir from a backup (pebble/ with its store-stamp), or move the data dir aside to start an empty store", store, secretPath)
}

// nestedDataDir refuses a data dir one of whose direct subdirectories is a
// data dir itself (pebble/ and store-stamp): a backup restored into the data
// dir instead of as it. `cp -a BACKUP /var/lib/fraudd` does that whenever
// /var/lib/fraudd exists, as it always does under the shipped unit's
// StateDirectory, and fraudd would start on the old state (or a new empty
// store) without a word, like the lost or older stores storeLost and the
// stamp refuse. fraudd never writes one: a backup into the data dir is
// refused.
func nestedDataDir(dataDir string) error {
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return fmt.Errorf("read data dir: %w", err)
	}
	for _, e := range entries {
		sub := filepath.Join(dataDir, e.Name())
		if e.IsDir() && isDataDir(sub) {
			return fmt.Errorf("the data dir %s holds another data dir, %s (pebble/ and %s): a backup restored into the data dir rather than as it; move the data dir aside and copy the backup into its place (README: Backups and restore), or move %s out of the data dir to start on the data dir as it is", dataDir, sub, storage.StampFileName, sub)
		}
	}
	return nil
}

// isDataDir says whether dir holds a store and its stamp file, as every data
// dir fraudd has started on, and every backup, does.
func isDataDir(dir string) bool {
	store, err := os.Stat(filepath.Join(dir, backup.StoreDir))
	if err != nil || !store.IsDir() {
		return false
	}
	stamp, err := os.Stat(filepath.Join(dir, storage.StampFileName))
	return err == nil && stamp.Mode().IsRegular()
}

// storeWasWritten reports whether the store holds state sealed or keyed under
// a master secret: a key check, or (stores from before key checks) an account.
func storeWasWritten(db *storage.DB) (bool, error) {
	has, err := db.HasKeyCheck()
	if err != nil || has {
		return has, err
	}
	errFound := errors.New("found")
	err = db.Accounts(func(*storage.Account) error { return errFound })
	if errors.Is(err, errFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("scan accounts: %w", err)
	}
	return false, nil
}

// loadAdminToken returns --admin-token (trimmed and checked by tokenValue),
// or the data dir's admin-token file, creating it (0600) on first start. Only the file's path is ever logged.
func loadAdminToken(cfg *serveConfig, log *slog.Logger) (string, error) {
	if cfg.adminToken != "" {
		return cfg.adminToken, nil
	}
	path := filepath.Join(cfg.dataDir, "admin-token")
	// An empty file was never a usable token (a first start killed
	// between creating the file and writing it): a new one replaces it.
	b, created, err := readOrCreate(path, func() string { return "adm_" + secrets.Random62(32) },
		func() (bool, error) { return true, nil }, log)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	if created {
		log.Info("generated admin token", "path", path)
	} else {
		log.Info("admin token", "path", path)
	}
	return strings.TrimSpace(string(b)), nil
}

// readOrCreate reads the secret file at path, or creates it with gen's
// value. A file that is there but empty is what a start killed between
// creating the file and writing it leaves (kill -9, an OOM kill): when
// emptyOK says nothing depends on it, it is written anew (and the log says
// so) instead of stopping every later start on "is empty"; otherwise it is
// refused.
func readOrCreate(path string, gen func() string, emptyOK func() (bool, error), log *slog.Logger) ([]byte, bool, error) {
	b, err := os.ReadFile(path)
	flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	switch {
	case err == nil && len(strings.TrimSpace(string(b))) > 0:
		return []byte(strings.TrimSpace(string(b))), false, nil
	case err == nil:
		ok, oerr := false, error(nil)
		if emptyOK != nil {
			ok, oerr = emptyOK()
		}
		if oerr != nil {
			return nil, false, fmt.Errorf("%s is empty: %w", path, oerr)
		}
		if !ok {
			return nil, false, fmt.Errorf("%s is empty", path)
		}
		log.Warn("secret file is empty, as a start killed while writing it leaves it; writing a new one", "path", path)
		flag = os.O_WRONLY | os.O_TRUNC
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	v := gen()
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.WriteString(v + "\n"); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("close %s: %w", path, err)
	}
	// The file's name lives in its directory: without syncing that too, a
	// power loss could take the new file away after the store (synced)
	// recorded the secret's check value, and the secret would be lost.
	if err := backup.SyncDir(filepath.Dir(path)); err != nil {
		return nil, false, err
	}
	return []byte(v), true, nil
}
