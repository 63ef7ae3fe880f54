package fastapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

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
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/internal/accesstoken"
	"github.com/fraudd/fraudd/internal/backup"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/metrics"
)

// Config is the HTTP surface's configuration. The zero value serves, with no
// admin API (empty AdminToken) and the edge block off.
type Config struct {
	AdminToken     string
	TrustedProxies []netip.Prefix
	// EdgeBlock turns on the 403 `error code: 1010` for requests with no
	// User-Agent or one starting with an entry of EdgeBlockAgents.
	EdgeBlock       bool
	EdgeBlockAgents []string
	Version         string
	StartedAt       time.Time
	Logger          *slog.Logger
	ReadTimeout     time.Duration
	WriteTimeout    time.Duration
	IdleTimeout     time.Duration
	// MCPOrigins are the browser origins allowed to call /mcp besides none
	// (server-to-server clients) and the server's own loopback origin; as
	// ParseMCPOrigins returns them.
	MCPOrigins []string

	// AdminSeparate serves the admin API and the console only on the
	// listener given to ServeAdmin (--admin-addr), keeping them off the
	// public one.
	AdminSeparate bool
	// AccessLog, when set, gets one line per request (--access-log).
	AccessLog *slog.Logger
	// Metrics, when set, counts requests by route and status with their
	// latency, decisions and refusals, and GET /metrics serves it to the
	// operator (the admin token, on the admin API's listener).
	Metrics *metrics.Metrics
}

// DefaultEdgeBlockAgents are bare library defaults that real integrations do
// not send. curl, browsers and Go's net/http default are never on it.
var DefaultEdgeBlockAgents = []string{defaultUserAgentUA}

// StoreHealth tells whether the account store can be read.
type StoreHealth = checks.StoreHealth

// FeedReader reads the threat feed's counts (*traffic.Counter, or a
// cluster's sum over its members).
type FeedReader interface {
	Feed(now time.Time) (traffic.Feed, error)
}

// Deps are the state owners the server talks to. The public operations reach
// them through the pipeline (actors/checks); the admin API, the token
// endpoint and the status pages use them directly.
type Deps struct {
	Accounts *accounts.Service
	Store    StoreHealth
	Clock    clock.Clock
	// TestClock, when set, enables POST /admin/v1/clock.
	TestClock *clock.Offset
	// Limits owns every per-address limiter, the invalid-key lockout included.
	Limits *iplimit.Client
	// Quota owns per-account allowances.
	Quota *quota.Client
	// ChargeQuota, when set (cluster mode), is what the checks pipeline
	// charges instead of Quota: a client that routes each account to its
	// shard's owner. Admin usage views still read Quota.
	ChargeQuota checks.Quota
	// Feeds holds the current intelligence snapshot.
	Feeds *netlists.Store
	// Mail is the outbox (GET /admin/v1/mail); nil lists nothing.
	Mail *mailer.Mailer
	// Traffic counts API traffic for the threat feed; nil reports zeros.
	Traffic *traffic.Counter
	// TrafficFeed, when set (cluster mode), is what the threat feed reads
	// instead of Traffic: every member's counts, summed.
	TrafficFeed FeedReader
	// Tokens mints and verifies OAuth access tokens; nil disables OAuth.
	Tokens *accesstoken.Issuer
	// Health probes the service's parts for /api/status; nil reports live state only.
	Health *health.Monitor
	// Webhooks delivers threat alerts and keeps the delivery log; nil sends
	// nothing and lists no deliveries.
	Webhooks *webhook.Service
	// NetTokens mints and verifies the collector's network tokens; nil
	// refuses every real token (400 Invalid token.).
	NetTokens *nettoken.Codec
	// Devices owns the collector's device events; nil: none resolve.
	Devices *events.Client
	// ClusterEvents, when set (cluster mode), is what the checks pipeline
	// stores and resolves device events through instead of Devices: a
	// client that resolves an event at the node that stored it.
	ClusterEvents checks.Events
	// VisitorKey keys device visitor ids (secrets.LabelVisitorID).
	VisitorKey []byte
	// DeviceHist owns each customer's device history and account links
	// (customer_history, linked_accounts, the account object, the admin
	// device list); nil answers without them.
	DeviceHist *devicehist.Client
	// DeviceList, when set (cluster mode), is what the admin device list
	// reads instead of DeviceHist: each account's list at the owner of its
	// shard, where its history lives.
	DeviceList DeviceLister
	// Challenges owns the device-evidence beta (challenges, GPU samples,
	// consistency hashes); nil answers the challenge route 503 and reports
	// submitted evidence unavailable.
	Challenges *challenge.Client
	// Backup writes a backup of the data directory into an absolute
	// directory path (POST /admin/v1/backup); nil answers 404.
	Backup func(dir string) (*backup.Report, error)
	// Recent keeps each account's recent evaluations for the console; nil
	// records nothing and lists none.
	Recent *recent.Client
	// EvaluationList, DeliveryList and MailList, when set (cluster mode),
	// are what the admin lists of an account's recent evaluations, its
	// webhook deliveries and the outbox read instead of Recent, Webhooks
	// and Mail: every member's, merged.
	EvaluationList EvaluationLister
	DeliveryList   DeliveryLister
	MailList       MailLister
	// Shards reports stopped or stuck actor shards for GET /readyz; nil
	// checks none.
	Shards ShardHealth
}

// pipeline wires the public operations' flows to deps. A nil part turns
// its feature off (checks.Config).
func pipeline(d *Deps, log *slog.Logger) *checks.Service {
	cfg := checks.Config{Accounts: d.Accounts, Limits: d.Limits, Quota: d.Quota, Feeds: d.Feeds,
		Store: d.Store, VisitorKey: d.VisitorKey, Logger: log}
	if d.ChargeQuota != nil {
		cfg.Quota = d.ChargeQuota
	}
	if d.Tokens != nil {
		cfg.Tokens = d.Tokens
	}
	if d.NetTokens != nil {
		cfg.NetTokens = d.NetTokens
	}
	if d.Devices != nil {
		cfg.Events = d.Devices
	}
	if d.ClusterEvents != nil {
		cfg.Events = d.ClusterEvents
	}
	if d.DeviceHist != nil {
		cfg.History = d.DeviceHist
	}
	if d.Challenges != nil {
		cfg.Challenges = d.Challenges
	}
	if d.Traffic != nil {
		cfg.Traffic = d.Traffic
	}
	if d.Webhooks != nil {
		cfg.Webhooks = d.Webhooks
	}
	if d.Recent != nil {
		cfg.Recent = d.Recent
	}
	p, err := checks.New(cfg)
	if err != nil {
		// A wiring mistake of the caller, not input: cmd/fraudd sets them all.
		panic("fastapi.New: " + err.Error())
	}
	return p
}

// Server is the HTTP surface.
type Server struct {
	cfg    Config
	deps   Deps
	checks *checks.Service
	log    *slog.Logger
	// routes are every route, in match order; the listeners match through
	// the sets index builds from them, so a route added later needs index.
	routes []*route
	// all, public and admin index the routes each listener serves (index):
	// all of them on one listener; with Config.AdminSeparate, public and
	// admin.
	all, public, admin routeSet
	srv                *fasthttp.Server
	// unmatched counts the requests no route answered, unreadable those
	// fasthttp could not read (/metrics).
	unmatched, unreadable *metrics.Route
	status                atomic.Pointer[statusBody]
	mcp                   fasthttp.RequestHandler
	reqs                  sync.Pool

	idPrefix [8]byte

	// adminSrv is the admin listener's server (Config.AdminSeparate).
	adminSrv *fasthttp.Server
}

type handlerFunc func(ctx *fasthttp.RequestCtx, r *request)

// surface says which listener serves a route when the admin API has its own
// (Config.AdminSeparate); otherwise the one listener serves every route.
type surface uint8

const (
	onPublic surface = iota
	onAdmin          // the admin API, the console and /metrics
	onBoth           // read-only public pages the console shows too
)

func surfaceOf(pattern string) surface {
	switch {
	case strings.HasPrefix(pattern, "/admin/"), pattern == "/console", strings.HasPrefix(pattern, "/console/"), pattern == "/metrics":
		return onAdmin
	case pattern == "/api/status", pattern == "/api/threat-feed":
		return onBoth
	}
	return onPublic
}

// route is one line of the route table.
type route struct {
	method  string
	pattern string
	// admin: the operator token is required (and access is not used).
	admin bool
	// access is what the operation asks of its caller: key, allowlist,
	// sandbox, per-address limits (the admission table of actors/checks).
	access checks.Access
	// cors: the answer carries the collector's CORS headers (corsHeaders),
	// the admission's refusals included.
	cors    bool
	handler handlerFunc
	segs    []string
	// nsegs is len(segs): matchIn skips a route whose segment count differs
	// from the path's before comparing any segment.
	nsegs int
	// rest: the last segment is "{name...}", the rest of the path, slashes
	// and all, possibly empty.
	rest bool
	// obs counts the route's requests for /metrics (nil: no metrics).
	obs *metrics.Route
}

// request is the per-request state handlers share; pooled. Call is the
// request as the pipeline sees it: address, time, caller.
type request struct {
	checks.Call
	params  [2]string
	nparams int
	// eval and evalJSON are the evaluate handler's request and its decoding
	// scratch, kept here so the hot path allocates neither.
	eval     checks.EvalRequest
	evalJSON evalJSON
}

// param returns the i-th path parameter. It aliases the request buffer, which
// fasthttp reuses after the handler returns: copy it (strings.Clone) before it
// goes anywhere that outlives the request.
func (r *request) param(i int) string { return r.params[i] }

// New builds the server and its route table.
func New(cfg Config, deps Deps) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if deps.Clock == nil {
		deps.Clock = clock.Real{}
	}
	if cfg.StartedAt.IsZero() {
		cfg.StartedAt = deps.Clock.Now()
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 10 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 60 * time.Second
	}
	s := &Server{cfg: cfg, deps: deps, log: cfg.Logger}
	s.checks = pipeline(&s.deps, s.log)
	s.reqs.New = func() any { return new(request) }
	const hexd = "0123456789abcdef"
	for i := range s.idPrefix {
		s.idPrefix[i] = hexd[rand.IntN(16)]
	}
	s.mcp = s.newMCP()
	s.routes = s.routeTable()
	for _, rt := range s.routes {
		rt.segs = strings.Split(strings.Trim(rt.pattern, "/"), "/")
		rt.nsegs = len(rt.segs)
		rt.rest = isRestSeg(rt.segs[rt.nsegs-1])
		rt.obs = cfg.Metrics.Route(rt.label())
	}
	s.index()
	s.unmatched = cfg.Metrics.Route("unmatched")
	s.unreadable = cfg.Metrics.Route("unreadable")
	s.srv = s.newHTTPServer(s.serveHTTP)
	if cfg.AdminSeparate {
		s.adminSrv = s.newHTTPServer(s.serveAdminHTTP)
	}
	return s
}

func (s *Server) newHTTPServer(h fasthttp.RequestHandler) *fasthttp.Server {
	cfg := s.cfg
	return &fasthttp.Server{
		Handler:                       h,
		ErrorHandler:                  s.handleParseError,
		Name:                          "fraudd",
		ReadTimeout:                   cfg.ReadTimeout,
		WriteTimeout:                  cfg.WriteTimeout,
		IdleTimeout:                   cfg.IdleTimeout,
		MaxRequestBodySize:            maxAPIBody,
		ReadBufferSize:                readBufferSize,
		DisableHeaderNamesNormalizing: false,
		NoDefaultContentType:          true,
		// A stop ends each keep-alive connection after its answer: saying
		// so in that answer (Connection: close) keeps a client from
		// sending its next request on a connection about to close, which
		// then got a reset for a request never read.
		CloseOnShutdown: true,
		// No route reads multipart (SPEC 4.1: "Multipart is not read"):
		// parsing it while reading the request turned a body labelled
		// multipart into a 400 before authentication.
		DisablePreParseMultipartForm: true,
		// fasthttp's parse errors quote the request's header block, keys
		// included; the secure form leaves it out (and fasthttpLogger
		// redacts what is still quoted).
		SecureErrorLogMessage: true,
		Logger:                newFasthttpLogger(cfg.Logger),
	}
}

// routeTable lists every route with who may call it. Body limits are the
// server-wide 64 KiB cap. /mcp authenticates inside its handler: a bearer is
// optional there.
func (s *Server) routeTable() []*route {
	rs := []*route{
		{method: "GET", pattern: "/api/status", handler: s.handleStatus},
		// Probes: no auth, no limiter, no edge block (see Handle).
		{method: "GET", pattern: "/healthz", handler: s.handleHealthz},
		{method: "GET", pattern: "/readyz", handler: s.handleReadyz},
		{method: "GET", pattern: "/openapi.json", handler: s.handleOpenAPI},
		// The operator's: the admin token, on the admin API's listener.
		{method: "GET", pattern: "/metrics", admin: true, handler: s.handleMetrics},

		{method: "GET", pattern: "/admin/v1/accounts", admin: true, handler: s.adminListAccounts},
		{method: "POST", pattern: "/admin/v1/accounts", admin: true, handler: s.adminCreateAccount},
		{method: "GET", pattern: "/admin/v1/accounts/{id}", admin: true, handler: s.adminGetAccount},
		{method: "PATCH", pattern: "/admin/v1/accounts/{id}", admin: true, handler: s.adminPatchAccount},
		{method: "POST", pattern: "/admin/v1/accounts/{id}/keys/live/rotate", admin: true, handler: s.adminRotateLive},
		{method: "POST", pattern: "/admin/v1/accounts/{id}/keys/live/revoke-previous", admin: true, handler: s.adminRevokePrevious},
		{method: "POST", pattern: "/admin/v1/accounts/{id}/keys/test/rotate", admin: true, handler: s.adminRotateTest},
		{method: "GET", pattern: "/admin/v1/accounts/{id}/rules", admin: true, handler: s.adminGetRules},
		{method: "PUT", pattern: "/admin/v1/accounts/{id}/rules", admin: true, handler: s.adminPutRules},
		{method: "GET", pattern: "/admin/v1/accounts/{id}/exceptions", admin: true, handler: s.adminGetPins},
		{method: "PUT", pattern: "/admin/v1/accounts/{id}/exceptions", admin: true, handler: s.adminPutPins},
		{method: "PUT", pattern: "/admin/v1/accounts/{id}/webhook", admin: true, handler: s.adminPutWebhook},
		{method: "POST", pattern: "/admin/v1/accounts/{id}/webhook/secret/rotate", admin: true, handler: s.adminRotateWebhookSecret},
		{method: "POST", pattern: "/admin/v1/accounts/{id}/webhook/test", admin: true, handler: s.adminWebhookTest},
		{method: "GET", pattern: "/admin/v1/accounts/{id}/webhook/deliveries", admin: true, handler: s.adminWebhookDeliveries},
		{method: "GET", pattern: "/admin/v1/accounts/{id}/devices", admin: true, handler: s.adminDevices},
		{method: "GET", pattern: "/admin/v1/accounts/{id}/usage", admin: true, handler: s.adminUsage},
		{method: "GET", pattern: "/admin/v1/accounts/{id}/evaluations", admin: true, handler: s.adminEvaluations},
		{method: "GET", pattern: "/admin/v1/feeds", admin: true, handler: s.adminFeeds},
		{method: "GET", pattern: "/admin/v1/mail", admin: true, handler: s.adminMail},
		{method: "POST", pattern: "/admin/v1/clock", admin: true, handler: s.adminClock},
		{method: "POST", pattern: "/admin/v1/backup", admin: true, handler: s.adminBackup},

		{method: "POST", pattern: "/v1/evaluate", access: checks.AccessEvaluate, handler: s.handleEvaluate},
		{method: "GET", pattern: "/v1/evaluate/sample", access: checks.AccessSample, handler: s.handleSample},
		{method: "GET", pattern: "/v1/lookup/{ip...}", access: checks.AccessLookup, handler: s.handleLookup},
		{method: "POST", pattern: "/v1/device-evidence/challenge", access: checks.AccessChallenge, handler: s.handleChallenge},
		{method: "GET", pattern: "/v1/usage", access: checks.AccessUsage, handler: s.handleUsage},
		{method: "POST", pattern: "/mcp", handler: s.handleMCP},
		{method: "OPTIONS", pattern: "/mcp", handler: s.handleMCPPreflight},
		{method: "POST", pattern: "/oauth/token", handler: s.handleToken},
		{method: "GET", pattern: "/.well-known/oauth-authorization-server", handler: s.handleASMetadata},
		{method: "GET", pattern: "/.well-known/oauth-protected-resource", handler: s.handlePRMetadata},
		{method: "GET", pattern: "/api/threat-feed", access: checks.AccessFeed, handler: s.handleThreatFeed},
		{method: "POST", pattern: "/api/lookup", handler: s.handleFreeLookup},
		{method: "POST", pattern: "/api/lookup-bulk", handler: s.handleBulkLookup},

		{method: "GET", pattern: "/console", handler: s.handleConsole},
		{method: "GET", pattern: "/console/{file}", handler: s.handleConsole},

		{method: "GET", pattern: "/collector.js", handler: s.handleCollectorJS},
		{method: "POST", pattern: "/v1/collect/network", access: checks.AccessCollect, cors: true, handler: s.handleCollectNetwork},
		{method: "OPTIONS", pattern: "/v1/collect/network", handler: s.handleCollectPreflight},
		{method: "POST", pattern: "/v1/collect/device", access: checks.AccessCollect, cors: true, handler: s.handleCollectDevice},
		{method: "OPTIONS", pattern: "/v1/collect/device", handler: s.handleCollectPreflight},
	}
	return rs
}

// rewire rebuilds the pipeline after deps changed (tests swap parts).
func (s *Server) rewire() { s.checks = pipeline(&s.deps, s.log) }

// Serve serves on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(lingerListener{ln}) }

// ServeAdmin serves the admin API and the console on ln until Shutdown; it
// needs Config.AdminSeparate.
func (s *Server) ServeAdmin(ln net.Listener) error {
	if s.adminSrv == nil {
		return errors.New("fastapi: ServeAdmin needs Config.AdminSeparate")
	}
	return s.adminSrv.Serve(lingerListener{ln})
}

// Shutdown stops accepting, waits for in-flight requests, and closes idle
// keep-alive connections, on both listeners.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.ShutdownWithContext(ctx)
	if s.adminSrv != nil {
		err = errors.Join(err, s.adminSrv.ShutdownWithContext(ctx))
	}
	return err
}

// index builds the listeners' route sets from s.routes.
func (s *Server) index() {
	s.all = newRouteSet(s.routes)
	if !s.cfg.AdminSeparate {
		return
	}
	var public, admin []*route
	for _, rt := range s.routes {
		switch surfaceOf(rt.pattern) {
		case onPublic:
			public = append(public, rt)
		case onAdmin:
			admin = append(admin, rt)
		case onBoth:
			public = append(public, rt)
			admin = append(admin, rt)
		}
	}
	s.public, s.admin = newRouteSet(public), newRouteSet(admin)
}

// Handle is the public listener's fasthttp handler.
func (s *Server) Handle(ctx *fasthttp.RequestCtx) { s.handle(ctx, s.publicRoutes()) }

// HandleAdmin is the admin listener's fasthttp handler (Config.AdminSeparate).
func (s *Server) HandleAdmin(ctx *fasthttp.RequestCtx) { s.handle(ctx, &s.admin) }

// publicRoutes are the public listener's: every route unless the admin API
// has its own listener.
func (s *Server) publicRoutes() *routeSet {
	if s.cfg.AdminSeparate {
		return &s.public
	}
	return &s.all
}

// handle serves one request from routes: request id, edge block, routing,
// auth. It reports the route that answered: nil when none did (framing
// errors, the edge block, unknown paths and methods).
func (s *Server) handle(ctx *fasthttp.RequestCtx, routes *routeSet) (rt *route) {
	// Response headers keep the SPEC's spelling (X-RateLimit-Limit, not
	// fasthttp's X-Ratelimit-Limit); request headers stay case-insensitive.
	ctx.Response.Header.DisableNormalizing()
	s.setRequestID(ctx)
	if !s.framingOK(ctx) {
		return
	}
	path := ctx.Path()
	if s.cfg.EdgeBlock && !edgeExempt(path) && s.edgeBlocked(ctx.UserAgent()) {
		ctx.SetStatusCode(edgeBlockStatus)
		ctx.SetContentType(contentTypeText)
		ctx.SetBodyString(edgeBlockBody)
		return
	}
	r := s.reqs.Get().(*request)
	*r = request{Call: checks.Call{Now: s.deps.Clock.Now()}}
	copy(r.RequestID[:], ctx.Response.Header.Peek(headerRequestID))
	defer s.reqs.Put(r)
	defer s.recoverPanic(ctx)
	var allow string
	rt, allow = matchIn(routes, ctx.Method(), path, r)
	if rt == nil {
		if allow != "" {
			ctx.Response.Header.Set("Allow", allow)
			if bytes.Equal(bytes.Trim(path, "/"), []byte("mcp")) {
				// GET (a standalone SSE stream) and DELETE (a session) are
				// not offered by a stateless server: a JSON-RPC error there.
				// The path is read as matchIn reads it: /mcp/ is /mcp. A
				// browser agent of a listed origin reads it as any answer
				// there (CORS); another origin gets /mcp's 403.
				if !s.mcpOriginOK(ctx) {
					return
				}
				mcpCORS(ctx)
				s.rpcError(ctx, fasthttp.StatusMethodNotAllowed, nil, rpcTransportError, checks.MsgMethod)
				return
			}
			s.writeError(ctx, fasthttp.StatusMethodNotAllowed, checks.MsgMethod, "", "")
			return
		}
		s.writeError(ctx, fasthttp.StatusNotFound, checks.MsgNotFound, "", "")
		return
	}
	if len(ctx.Request.Header.ContentEncoding()) != 0 && !s.decodeBody(ctx) {
		return
	}
	if b := ctx.PostBody(); len(b) >= len(utf8BOM) && string(b[:len(utf8BOM)]) == utf8BOM {
		// RFC 8259 §8.1: a parser may ignore a byte order mark; Windows
		// tools put one before JSON they write.
		ctx.Request.SetBody(b[len(utf8BOM):])
	}
	r.Addr = s.clientAddr(ctx)
	if rt.admin {
		// Operator answers carry secrets (new keys, webhook secrets) and
		// account data: never kept by a cache, never sniffed as another type.
		ctx.Response.Header.Set("Cache-Control", "no-store")
		ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
		valid, presented := s.adminAuthorized(ctx)
		if ref := s.checks.AdmitOperator(&r.Call, presented, valid); ref != nil {
			s.refuse(ctx, ref)
			return
		}
	} else {
		if rt.cors {
			corsHeaders(ctx)
		}
		var cred checks.Credential
		if rt.access.Key {
			cred = requestCredential(ctx)
		}
		if ref := s.checks.Admit(&r.Call, cred, rt.access); ref != nil {
			s.refuse(ctx, ref)
			return
		}
	}
	rt.handler(ctx, r)
	s.checks.Settle(&r.Call)
	return rt
}

// recoverPanic turns a handler panic into a logged 500 instead of a dead
// process: one bad request must never take the service down.
func (s *Server) recoverPanic(ctx *fasthttp.RequestCtx) {
	if p := recover(); p != nil {
		// The answer keeps the request's id, and the line carries it: the
		// id a client quotes from its 500 must lead to this line.
		id := string(ctx.Response.Header.Peek(headerRequestID))
		s.log.Error("handler panic", "panic", p, "path", string(ctx.Path()), "request_id", id, "stack", string(debug.Stack()))
		ctx.Response.Reset()
		ctx.Response.Header.DisableNormalizing()
		ctx.Response.Header.Set(headerRequestID, id)
		s.writeError(ctx, fasthttp.StatusInternalServerError, checks.MsgServerError, "", "")
	}
}

// match finds the public listener's route for method and path. When the
// path exists under other methods only, it returns nil and the Allow header
// value.
func (s *Server) match(method, path []byte, r *request) (*route, string) {
	return matchIn(s.publicRoutes(), method, path, r)
}

// routeSet is one listener's routes in the order they match, with an index
// of the paths that are some route's whole pattern (no parameter), so that
// the API's own paths skip the scan over every route.
type routeSet struct {
	list []*route
	// exact maps such a trimmed path to every route of list that matches
	// it, in list order: those with that pattern and the parameterised
	// ones it fits. Matching over them gives what matching over list does.
	exact map[string][]*route
	// heads maps the first two segments of a longer path ("v1/lookup" of
	// "v1/lookup/8.8.8.8") to every route of list that may match a path
	// that begins so, in list order: a parameterised path then scans a
	// handful of routes, not all of them (the lookup's was a tenth of its
	// handler's CPU in a profile). A path whose head is not here scans list.
	heads map[string][]*route
}

func newRouteSet(list []*route) routeSet {
	set := routeSet{list: list, exact: make(map[string][]*route)}
	var scratch request
	for _, rt := range list {
		if strings.Contains(rt.pattern, "{") {
			continue
		}
		p := strings.Trim(rt.pattern, "/")
		if _, ok := set.exact[p]; ok {
			continue
		}
		n := strings.Count(p, "/") + 1
		var fit []*route
		for _, other := range list {
			if other.fits(n) && matchSegs(other.segs, p, &scratch) {
				fit = append(fit, other)
			}
		}
		set.exact[p] = fit
	}
	set.heads = make(map[string][]*route)
	for _, rt := range list {
		if len(rt.segs) < 2 || isParamSeg(rt.segs[0]) || isParamSeg(rt.segs[1]) {
			continue
		}
		head := rt.segs[0] + "/" + rt.segs[1]
		if _, ok := set.heads[head]; ok {
			continue
		}
		var fit []*route
		for _, other := range list {
			if mayStartWith(other.segs, rt.segs[:2]) {
				fit = append(fit, other)
			}
		}
		set.heads[head] = fit
	}
	return set
}

// isParamSeg reports whether a pattern segment matches any non-empty part
// ({id}) or any rest ({ip...}).
func isParamSeg(seg string) bool { return len(seg) > 1 && seg[0] == '{' }

// mayStartWith reports whether a pattern of segs may match a path of more
// than two segments whose first two are head.
func mayStartWith(segs, head []string) bool {
	for i, h := range head {
		if i == len(segs) {
			return false // the pattern is shorter than the path
		}
		if isRestSeg(segs[i]) {
			return true
		}
		if !isParamSeg(segs[i]) && segs[i] != h {
			return false
		}
	}
	return len(segs) > len(head)
}

// headOf returns the first two segments of a trimmed path of more than two.
func headOf(p string) (string, bool) {
	i := strings.IndexByte(p, '/')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(p[i+1:], '/')
	if j < 0 {
		return "", false
	}
	return p[:i+1+j], true
}

// matchIn is match over one listener's routes.
func matchIn(set *routeSet, method, path []byte, r *request) (*route, string) {
	// The path bytes live as long as the request; parameters that must
	// outlive it are copied by their handlers.
	p := strings.Trim(unsafe.String(unsafe.SliceData(path), len(path)), "/")
	var allow []string
	n := strings.Count(p, "/") + 1
	routes, ok := set.exact[p]
	if !ok {
		routes = set.list
		if head, long := headOf(p); long {
			if rs, ok := set.heads[head]; ok {
				routes = rs
			}
		}
	}
	for _, rt := range routes {
		if !rt.fits(n) || !matchSegs(rt.segs, p, r) {
			continue
		}
		if rt.method == string(method) || (rt.method == "GET" && string(method) == "HEAD") {
			return rt, ""
		}
		allow = append(allow, rt.method)
		if rt.method == "GET" {
			allow = append(allow, "HEAD") // every GET route answers HEAD
		}
	}
	r.nparams = 0
	return nil, strings.Join(allow, ", ")
}

// fits reports whether a path of n segments may match rt: as many as its
// pattern's, or with a rest segment at least the ones before it (the rest
// may be empty: "/v1/lookup/" trims to two segments).
func (rt *route) fits(n int) bool {
	if rt.rest {
		return n >= rt.nsegs-1
	}
	return n == rt.nsegs
}

// label is the route's path as /metrics and the OpenAPI document name it:
// a rest segment reads as a plain parameter ("/v1/lookup/{ip}").
func (rt *route) label() string { return strings.Replace(rt.pattern, "...}", "}", 1) }

func isRestSeg(seg string) bool {
	return len(seg) > 5 && seg[0] == '{' && strings.HasSuffix(seg, "...}")
}

// matchSegs matches a split pattern against a trimmed path, filling params.
// A rest segment ("{name...}") takes what is left of the path: a lookup of
// "10.0.0.0/8", or of nothing, reaches its handler and its 400 rather than
// the router's 404.
func matchSegs(segs []string, p string, r *request) bool {
	r.nparams = 0
	for i, seg := range segs {
		if isRestSeg(seg) {
			if r.nparams == len(r.params) {
				return false
			}
			r.params[r.nparams] = p
			r.nparams++
			return true
		}
		var part string
		if j := strings.IndexByte(p, '/'); j >= 0 {
			part, p = p[:j], p[j+1:]
		} else {
			part, p = p, ""
			if i != len(segs)-1 && !(i == len(segs)-2 && isRestSeg(segs[i+1])) {
				return false
			}
		}
		if len(seg) > 1 && seg[0] == '{' {
			if part == "" || r.nparams == len(r.params) {
				return false
			}
			r.params[r.nparams] = part
			r.nparams++
			continue
		}
		if seg != part {
			return false
		}
	}
	return p == ""
}

func (s *Server) edgeBlocked(ua []byte) bool {
	if len(bytes.TrimSpace(ua)) == 0 {
		return true
	}
	for _, a := range s.cfg.EdgeBlockAgents {
		if bytes.HasPrefix(ua, []byte(a)) {
			return true
		}
	}
	return false
}

// setRequestID stamps X-Request-Id: a per-process random prefix plus 16 random
// hex digits, without allocating.
func (s *Server) setRequestID(ctx *fasthttp.RequestCtx) {
	const hexd = "0123456789abcdef"
	var b [4 + 8 + 16]byte
	copy(b[:], "req_")
	copy(b[4:], s.idPrefix[:])
	x := rand.Uint64()
	for i := 0; i < 16; i++ {
		b[12+i] = hexd[x&15]
		x >>= 4
	}
	ctx.Response.Header.SetBytesV(headerRequestID, b[:])
}

// handleParseError maps fasthttp's request-parsing failures to JSON; an
// oversized body is 413, not fasthttp's default 400.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	defer func() {
		s.unreadable.Count(ctx.Response.StatusCode())
		if s.cfg.AccessLog != nil {
			// README: one line per request, these too (their answer
			// carries an X-Request-Id a client may quote). The method and
			// path are empty when the header was not read, or was reset
			// after a body that did not parse: fasthttp's header then
			// reads as its defaults, a GET / nobody sent.
			var took time.Duration
			if t := ctx.Time(); !t.IsZero() {
				took = time.Since(t)
			}
			var method, path []byte
			if len(ctx.Request.Header.RawHeaders()) > 0 {
				method, path = ctx.Method(), ctx.Path()
			}
			s.logAccessAs(ctx, took, method, path)
		}
	}()
	s.setRequestID(ctx)
	// The client may still be sending what was not read: let it finish and
	// read this answer.
	lingerOnClose(ctx)
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		s.writeError(ctx, fasthttp.StatusRequestEntityTooLarge, checks.MsgTooLarge, "", "")
		return
	}
	if errSmallBuffer(err) {
		s.writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, checks.MsgHeadersTooLarge, "", fmt.Sprintf(checks.HintHeadersTooLarge, readBufferSize))
		return
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		s.writeError(ctx, fasthttp.StatusRequestTimeout, checks.MsgTimeout, "", "")
		return
	}
	s.writeError(ctx, fasthttp.StatusBadRequest, checks.MsgBadRequest, "", "")
}

// clientAddr is the connection's address, or — when the peer is a trusted
// proxy — the right-most X-Forwarded-For hop that is not itself trusted.
func (s *Server) clientAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	var peer netip.Addr
	if ta, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		peer = ta.AddrPort().Addr().Unmap()
	}
	if !s.trusted(peer) {
		return peer
	}
	out := peer
	walkXFF(ctx.Request.Header.PeekAll("X-Forwarded-For"), func(a netip.Addr, err error, _ xffPos) bool {
		if err != nil {
			// A garbled hop ends the walk: everything left of it is unverifiable.
			return false
		}
		out = a
		return s.trusted(a)
	})
	return out
}

// walkXFF visits the X-Forwarded-For hops from the right, unmapped, until
// visit returns false; at tells, when asked, whether any hop is left of this
// one. Several lines are one list in order (RFC 9110 §5.3): a proxy may add
// its hop as a line of its own (HAProxy's forwardfor) after the one the
// client sent, so the walk starts at the last line.
func walkXFF(lines [][]byte, visit func(a netip.Addr, err error, at xffPos) bool) {
	for li := len(lines) - 1; li >= 0; li-- {
		xff := lines[li]
		for len(xff) > 0 {
			var hop []byte
			if i := bytes.LastIndexByte(xff, ','); i >= 0 {
				hop, xff = xff[i+1:], xff[:i]
			} else {
				hop, xff = xff, nil
			}
			hop = bytes.TrimSpace(hop)
			if len(hop) == 0 {
				continue // an empty list element (RFC 9110 §5.6.1): none to read
			}
			a, err := parseHop(hop)
			if !visit(a.Unmap(), err, xffPos{rest: xff, before: lines[:li]}) {
				return
			}
		}
	}
}

// xffPos is where walkXFF stands: what is left of the current line, and the
// lines before it. Only the proxy evidence asks, so the request path's
// client address does not pay for the scan.
type xffPos struct {
	rest   []byte
	before [][]byte
}

// more reports whether any hop is left of the current one.
func (p xffPos) more() bool {
	if len(bytes.TrimSpace(p.rest)) > 0 {
		return true
	}
	for _, l := range p.before {
		if len(bytes.TrimSpace(l)) > 0 {
			return true
		}
	}
	return false
}

// parseHop parses one X-Forwarded-For hop without copying it: the parsers
// keep nothing of their input but a zone, and a hop with a zone ("%") is
// copied first. Some proxies write a hop with its port (Azure Application
// Gateway: "203.0.113.9:51234", "[2001:db8::7]:443") or an IPv6 hop in
// brackets: the address is the hop. Refusing those would end the walk at
// the proxy, and everyone behind it would share one address's limits.
func parseHop(b []byte) (netip.Addr, error) {
	var h string
	if len(b) == 0 || bytes.IndexByte(b, '%') >= 0 {
		h = string(b)
	} else {
		h = unsafe.String(&b[0], len(b))
	}
	a, err := netip.ParseAddr(h)
	if err == nil {
		return a, nil
	}
	if ap, perr := netip.ParseAddrPort(h); perr == nil {
		return ap.Addr(), nil
	}
	if len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' {
		if a, berr := netip.ParseAddr(h[1 : len(h)-1]); berr == nil && a.Is6() {
			return a, nil
		}
	}
	return netip.Addr{}, err
}

func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fasthttpLogger routes fasthttp's printf logging into slog, at a bounded
// rate and without request contents: its connection errors quote the bytes
// a client sent (a malformed header line, a bad Transfer-Encoding value), and
// anyone can send malformed requests as fast as they like.
type fasthttpLogger struct {
	l       *slog.Logger
	lim     *rate.Limiter
	dropped atomic.Int64
}

// Connection-error log lines: a burst, then one a second.
const (
	fasthttpLogBurst = 10
	fasthttpLogEvery = time.Second
)

func newFasthttpLogger(l *slog.Logger) *fasthttpLogger {
	return &fasthttpLogger{l: l, lim: rate.NewLimiter(rate.Every(fasthttpLogEvery), fasthttpLogBurst)}
}

func (f *fasthttpLogger) Printf(format string, args ...any) {
	if !f.lim.Allow() {
		f.dropped.Add(1)
		return
	}
	var attrs []any
	if n := f.dropped.Swap(0); n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	// workerpool.go: "error when serving connection %q<->%q: %v" (local,
	// remote, error).
	if strings.HasPrefix(format, "error when serving connection") && len(args) == 3 {
		attrs = append(attrs, "remote", fmt.Sprint(args[1]), "err", redactQuoted(fmt.Sprint(args[2])))
		f.l.Warn("connection error", attrs...)
		return
	}
	f.l.Warn("fasthttp", append(attrs, "detail", redactQuoted(fmt.Sprintf(format, args...)))...)
}

// quotedRE matches a Go-quoted string, as %q writes it.
var quotedRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// redactQuoted drops every quoted string and any dumped buffer from a
// fasthttp message: those hold request bytes, which may be credentials.
func redactQuoted(msg string) string {
	if i := strings.Index(msg, ", contents:"); i >= 0 {
		msg = msg[:i]
	}
	return quotedRE.ReplaceAllString(msg, `"[redacted]"`)
}
