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
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/challenge"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/health"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/actors/traffic"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/fastapi"
	intelfeeds "github.com/fraudd/fraudd/intel/feeds"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/internal/accesstoken"
	"github.com/fraudd/fraudd/internal/backup"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// serveConfig is everything `fraudd serve` reads from flags and environment.
type serveConfig struct {
	addr            string
	dataDir         string
	adminToken      string
	secret          string
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
}

// env returns the FRAUDD_* variable or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return def
	}
	return d
}

func envBool(name string, def bool) bool {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def
	}
	return b
}

func parseServe(args []string, stderr io.Writer) (*serveConfig, error) {
	fs := flag.NewFlagSet("fraudd serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &serveConfig{}
	fs.StringVar(&c.addr, "addr", env("FRAUDD_ADDR", ":8080"), "listen address (env FRAUDD_ADDR)")
	fs.StringVar(&c.dataDir, "data-dir", env("FRAUDD_DATA_DIR", "./data"), "data directory (env FRAUDD_DATA_DIR)")
	fs.StringVar(&c.adminToken, "admin-token", env("FRAUDD_ADMIN_TOKEN", ""), "operator API token; generated into <data-dir>/admin-token when empty (env FRAUDD_ADMIN_TOKEN)")
	fs.StringVar(&c.secret, "secret", env("FRAUDD_SECRET", ""), "master secret; generated into <data-dir>/master-secret when empty (env FRAUDD_SECRET)")
	trusted := fs.String("trusted-proxies", env("FRAUDD_TRUSTED_PROXIES", ""), "comma-separated CIDRs whose X-Forwarded-For is believed (env FRAUDD_TRUSTED_PROXIES)")
	fs.BoolVar(&c.testClock, "test-clock", envBool("FRAUDD_TEST_CLOCK", false), "enable POST /admin/v1/clock (tests only; env FRAUDD_TEST_CLOCK)")
	level := fs.String("log-level", env("FRAUDD_LOG_LEVEL", "info"), "debug, info, warn or error (env FRAUDD_LOG_LEVEL)")
	fs.BoolVar(&c.edgeBlock, "edge-block", envBool("FRAUDD_EDGE_BLOCK", true), "answer 403 `error code: 1010` to requests with no User-Agent or a bare library default (env FRAUDD_EDGE_BLOCK)")
	agents := fs.String("edge-block-agents", env("FRAUDD_EDGE_BLOCK_AGENTS", strings.Join(fastapi.DefaultEdgeBlockAgents, ",")), "comma-separated User-Agent prefixes the edge block rejects (env FRAUDD_EDGE_BLOCK_AGENTS)")
	mcpOrigins := fs.String("mcp-origins", env("FRAUDD_MCP_ORIGINS", ""), "comma-separated browser origins (https://agent.example) allowed to call /mcp; requests without Origin always may (env FRAUDD_MCP_ORIGINS)")
	fs.DurationVar(&c.feedsRefresh, "feeds-refresh", envDuration("FRAUDD_FEEDS_REFRESH", 0), "download fresh feeds from upstream this often and swap them in without a pause; 0 = off (env FRAUDD_FEEDS_REFRESH)")
	fs.StringVar(&c.adminAddr, "admin-addr", env("FRAUDD_ADMIN_ADDR", ""), "serve the admin API and the console (/console) on this address only, e.g. 127.0.0.1:8081; empty: on --addr (env FRAUDD_ADMIN_ADDR)")
	fs.StringVar(&c.debugAddr, "debug-addr", env("FRAUDD_DEBUG_ADDR", ""), "serve Go's pprof profiles on this address (e.g. 127.0.0.1:6060); off when empty (env FRAUDD_DEBUG_ADDR)")
	fs.StringVar(&c.smtpURL, "smtp-url", env("FRAUDD_SMTP_URL", ""), "send mail through smtp://[user:pass@]host:port[?from=addr]; the outbox records either way (env FRAUDD_SMTP_URL)")
	fs.BoolVar(&c.allowPrivateWebhooks, "allow-private-webhooks", envBool("FRAUDD_ALLOW_PRIVATE_WEBHOOKS", false), "also accept http:// and loopback/private webhook receivers; for development and tests (env FRAUDD_ALLOW_PRIVATE_WEBHOOKS)")
	durability := fs.String("durability", env("FRAUDD_DURABILITY", "interval"), "interval: a counted call is answered once committed, and one group sync every --sync-interval makes it durable (a crash loses at most the last interval); strict: fsync before each answer (env FRAUDD_DURABILITY)")
	syncInterval := fs.String("sync-interval", env("FRAUDD_SYNC_INTERVAL", storage.DefaultSyncInterval.String()), "period of the group sync: the most a crash can lose in interval mode, and the bound for device history in either mode (env FRAUDD_SYNC_INTERVAL)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if c.durability, err = storage.ParseDurability(*durability); err != nil {
		return nil, fmt.Errorf("--durability: %w", err)
	}
	if c.syncInterval, err = time.ParseDuration(*syncInterval); err != nil || c.syncInterval < time.Millisecond || c.syncInterval > 10*time.Second {
		return nil, fmt.Errorf("--sync-interval: %q is not a duration between 1ms and 10s", *syncInterval)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	for _, p := range splitList(*trusted) {
		pr, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return nil, fmt.Errorf("--trusted-proxies: %q is not a CIDR", p)
			}
			pr = netip.PrefixFrom(a, a.BitLen())
		}
		c.trustedProxies = append(c.trustedProxies, pr.Masked())
	}
	c.edgeBlockAgents = splitList(*agents)
	origins, err := fastapi.ParseMCPOrigins(splitList(*mcpOrigins))
	if err != nil {
		return nil, fmt.Errorf("--mcp-origins: %w", err)
	}
	c.mcpOrigins = origins
	return c, nil
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

func runServe(args []string, stderr io.Writer) int {
	cfg, err := parseServe(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "fraudd serve: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, cfg, log); err != nil {
		if path, ok := storage.CorruptFile(err); ok {
			log.Error("fraudd stopped: a store file is corrupt; restore the data directory from a backup (README: Backups)", "file", path, "err", err)
			return 1
		}
		log.Error("fraudd stopped with an error", "err", err)
		return 1
	}
	return 0
}

// serve starts everything in order, serves until ctx ends, then stops in
// reverse: stop accepting and drain requests, stop actors, close Pebble.
func serve(ctx context.Context, cfg *serveConfig, log *slog.Logger) error {
	if err := secureDataDir(cfg.dataDir, log); err != nil {
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

	db, err := storage.Open(filepath.Join(cfg.dataDir, "pebble"), storage.Options{Logger: log,
		Durability: cfg.durability, SyncInterval: cfg.syncInterval})
	if err != nil {
		return err
	}
	if err := db.VerifyTables(); err != nil {
		_ = db.Close()
		return err
	}
	log.Info("storage durability", "mode", cfg.durability.String(), "sync_interval", cfg.syncInterval.String())
	defer func() {
		if err := db.Close(); err != nil {
			log.Error("close storage", "err", err)
		}
		log.Info("storage closed")
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

	system := actor.NewActorSystem(actor.WithLoggerFactory(func(s *actor.ActorSystem) *slog.Logger {
		return log.With("lib", "protoactor")
	}))
	defer func() {
		system.Shutdown()
		log.Info("actor system stopped")
	}()
	accts, err := accounts.Start(system.Root, accounts.Config{DB: db, Master: master, Clock: clk})
	if err != nil {
		return err
	}
	defer accts.Stop()
	limits := iplimit.New(system.Root, iplimit.Config{Clock: clk})
	defer func() {
		if err := limits.Stop(); err != nil {
			log.Error("stop per-address limiters", "err", err)
		}
	}()
	mail, err := mailer.New(system.Root, mailer.Config{DB: db, Accounts: accts, SMTPURL: cfg.smtpURL, Clock: clk, Logger: log})
	if err != nil {
		return err
	}
	defer mail.Stop()
	quotas := quota.New(system.Root, quota.Config{Store: db, Clock: clk, Logger: log, Notifier: mail})
	// Deferred after the limiters, so it runs before them: the quota shards
	// flush their last group commit while Pebble is still open.
	defer func() {
		if err := quotas.Stop(); err != nil {
			log.Error("stop quota actors", "err", err)
		}
	}()

	counts, err := traffic.New(system.Root, traffic.Config{Store: db, Clock: clk, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := counts.Stop(); err != nil {
			log.Error("stop traffic counter", "err", err)
		}
	}()

	// Device events and history (browser collector); stopped before Pebble
	// closes so its last group commit lands.
	devices := events.New(system.Root, events.Config{Store: db, Clock: clk, Logger: log})
	defer func() {
		if err := devices.Stop(); err != nil {
			log.Error("stop device actors", "err", err)
		}
	}()

	// Per-customer device history and account links; stopped before Pebble
	// closes so its last group commit lands.
	devHist, err := devicehist.New(system.Root, devicehist.Config{Store: db, Secret: master, Clock: clk, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := devHist.Stop(); err != nil {
			log.Error("stop device-history actors", "err", err)
		}
	}()

	// Device-evidence beta (challenges, GPU samples, consistency hashes);
	// GPU samples are stored sealed; challenges and consistency hashes are
	// memory only (a restart expires every challenge). Stopped before Pebble
	// closes.
	challenges := challenge.New(system.Root, challenge.Config{Key: master.Derive(secrets.LabelDeviceEvidence), Store: db, Clock: clk, Logger: log})
	defer func() {
		if err := challenges.Stop(); err != nil {
			log.Error("stop device-evidence actors", "err", err)
		}
	}()

	// Webhook shards stop before the mailer and storage they use (defers run
	// in reverse). Pending deliveries are kept in the store and resumed here
	// on their schedule, so a restart between a failed attempt and its retry
	// loses nothing (an interrupted attempt is made again).
	hooks, err := webhook.New(system.Root, webhook.Config{Accounts: accts, DB: db, Mail: mail, Clock: clk, Logger: log,
		AllowPrivate: cfg.allowPrivateWebhooks, UserAgent: "fraudd-webhooks/" + version})
	if err != nil {
		return err
	}
	defer func() {
		if err := hooks.Stop(); err != nil {
			log.Error("stop webhook actors", "err", err)
		}
	}()
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

	// The health monitor re-checks the store on a tick, so an unreadable disk
	// turns into 503s (and a recovered one back into service) without waiting
	// for a failed request, and keeps the status history.
	// A shard its supervisor stopped after repeated panics is restarted by
	// itself; until then /api/status reports the API degraded.
	monitor, err := health.New(system.Root, health.Config{DB: db, Clock: clk, Logger: log, Checks: health.Checks{
		Storage: db.Probe,
		Feeds:   func() bool { return feeds.Current().Coverage().TorExits > 0 },
		Actors:  actors.SupervisionOf(system).Down,
	}})
	if err != nil {
		return err
	}
	defer func() {
		if err := monitor.Stop(); err != nil {
			log.Error("stop health monitor", "err", err)
		}
	}()

	// Each account's recent evaluations for the console; its last batch is
	// written before Pebble closes.
	recents, err := recent.New(system.Root, recent.Config{Store: db, Clock: clk, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := recents.Stop(); err != nil {
			log.Error("stop recent-evaluations actor", "err", err)
		}
	}()

	srv := fastapi.New(fastapi.Config{
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
		DeviceHist: devHist, Challenges: challenges, Recent: recents,
		Backup: func(dir string) (*backup.Report, error) {
			return backup.Write(backup.Source{DataDir: cfg.dataDir, Store: db, SecretOutside: cfg.secret != ""}, dir)
		}})

	if cfg.debugAddr != "" {
		startDebug(cfg.debugAddr, db, log)
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
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		if adminLn != nil {
			adminLn.Close()
		}
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	db.Serving()
	log.Info("fraudd listening", "addr", ln.Addr().String(), "version", version, "data_dir", cfg.dataDir)
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
	log.Info("shutting down: draining requests")
	shutCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		log.Error("drain requests", "err", err)
	}
	log.Info("http server stopped")
	return nil
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
		b, created, err := readOrCreate(path, func() string { return secrets.RandomHex(32) })
		if err != nil {
			return secrets.Master{}, fmt.Errorf("master secret: %w", err)
		}
		if created {
			log.Info("generated master secret", "path", path)
		}
		m = secrets.FromBytes(b)
	}
	if err := db.VerifyKeyCheck(m.KeyCheck()); err != nil {
		if errors.Is(err, storage.ErrKeyCheckMismatch) {
			return secrets.Master{}, fmt.Errorf("the master secret from %s is not the one the store in %s was written with: restore the original master-secret file or --secret/FRAUDD_SECRET value", source, cfg.dataDir)
		}
		return secrets.Master{}, fmt.Errorf("master secret key check: %w", err)
	}
	return m, nil
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

// loadAdminToken returns --admin-token, or the data dir's admin-token file,
// creating it (0600) on first start. Only the file's path is ever logged.
func loadAdminToken(cfg *serveConfig, log *slog.Logger) (string, error) {
	if cfg.adminToken != "" {
		return cfg.adminToken, nil
	}
	path := filepath.Join(cfg.dataDir, "admin-token")
	b, created, err := readOrCreate(path, func() string { return "adm_" + secrets.Random62(32) })
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

func readOrCreate(path string, gen func() string) ([]byte, bool, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(strings.TrimSpace(string(b))) == 0 {
			return nil, false, fmt.Errorf("%s is empty", path)
		}
		return []byte(strings.TrimSpace(string(b))), false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	v := gen()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
	return []byte(v), true, nil
}
