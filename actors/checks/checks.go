package checks

import (
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/challenge"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/actors/traffic"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/internal/accesstoken"
)

// The narrow interfaces the pipeline calls. Each is what one actor client
// (or pure codec) offers the request path, so a test passes a fake and a
// cluster node a remote client. The comment names the implementation.
type (
	// Accounts resolves credentials (*accounts.Service).
	Accounts interface {
		Authenticate(key string, now time.Time) (accounts.Auth, bool)
		ResolveToken(account string, test bool, generation uint32, now time.Time) (accounts.Auth, bool)
		ByPublishableKey(pk string) *accounts.View
	}
	// Incomplete, when the Accounts also offer it (*accounts.Service),
	// reports that some accounts of the shared configuration could not be
	// read here: a key that resolves to nothing may be one of theirs.
	Incomplete interface{ Incomplete() bool }
	// StoreHealth tells whether the account store can be read (*storage.DB).
	StoreHealth interface{ Available() bool }
	// TokenVerifier checks OAuth access tokens (*accesstoken.Issuer).
	TokenVerifier interface {
		Verify(token string, now time.Time) (accesstoken.Claims, error)
	}
	// Limiter owns the per-address limiters and the lockout (*iplimit.Client).
	Limiter interface {
		Take(kinds iplimit.Kinds, addr netip.Addr, now time.Time) (iplimit.Verdict, error)
		Fail(k iplimit.Kind, addr netip.Addr, now time.Time)
	}
	// Quota owns the accounts' allowances (*quota.Client).
	Quota interface {
		Charge(quota.Charge) (quota.ChargeResult, error)
		Usage(quota.Usage) (quota.UsageView, error)
		CountTotal(account string, now time.Time)
		Collect(quota.Collect) (quota.CollectResult, error)
	}
	// Feeds holds the current intelligence snapshot (*netlists.Store).
	Feeds interface{ Current() *netlists.Snapshot }
	// NetTokens mints and verifies the collector's network tokens
	// (*nettoken.Codec).
	NetTokens interface {
		Sign(account string, f *nettoken.Facts) string
		Verify(account, token string) (nettoken.Facts, bool)
	}
	// Events owns the collector's device events (*events.Client).
	Events interface {
		Collect(events.Collected) (events.EventID, error)
		Resolve(events.Resolve) (events.Resolved, error)
		Peek(events.Resolve) (events.Resolved, error)
	}
	// History owns each customer's device history (*devicehist.Client).
	History interface {
		Observe(devicehist.Observation) (devicehist.Facts, error)
	}
	// Challenges owns the device-evidence beta (*challenge.Client).
	Challenges interface {
		Issue(challenge.Issue) (challenge.Issued, error)
		Submit(challenge.Submit) (challenge.Submitted, error)
		Purge(customer string) error
	}
	// Traffic counts API traffic for the threat feed (*traffic.Counter).
	Traffic interface{ Record(traffic.Record) }
	// Webhooks queues threat alerts (*webhook.Service).
	Webhooks interface{ Notify(*webhook.Event) }
	// Recent keeps each account's recent evaluations for the console
	// (*recent.Client).
	Recent interface{ Record(recent.Entry) }
)

// Config wires the pipeline. Accounts, Limits, Quota and Feeds are
// required; every other part may be nil, which turns its feature off (the
// off behaviour is documented on each field) without a nil check in any
// flow.
type Config struct {
	Accounts Accounts
	Limits   Limiter
	Quota    Quota
	Feeds    Feeds
	// Store nil: always readable.
	Store StoreHealth
	// Tokens nil: OAuth access tokens never authenticate.
	Tokens TokenVerifier
	// NetTokens nil: every real token is refused (400 Invalid token.) and
	// the collector cannot mint one (500).
	NetTokens NetTokens
	// Events nil: no device event resolves (device_status unavailable) and
	// the collector cannot store one (503).
	Events Events
	// VisitorKey keys device visitor ids (secrets.LabelVisitorID).
	VisitorKey []byte
	// History nil: answers carry no customer history and no account object.
	History History
	// Challenges nil: the challenge route answers 503 and submitted
	// evidence is reported unavailable.
	Challenges Challenges
	// Traffic nil: nothing is counted for the threat feed.
	Traffic Traffic
	// Webhooks nil: no alert is sent.
	Webhooks Webhooks
	// Recent nil: the console lists no recent evaluations.
	Recent Recent
	Logger *slog.Logger
}

// Service runs the public operations over the parts in Config.
type Service struct {
	accounts   Accounts
	incomplete Incomplete // nil: the accounts always know every key
	limits     Limiter
	quota      Quota
	feeds      Feeds
	store      StoreHealth
	tokens     TokenVerifier
	netTokens  NetTokens
	events     Events
	visitorKey []byte
	history    History
	challenges Challenges
	traffic    Traffic
	webhooks   Webhooks
	recent     Recent
	log        *slog.Logger

	// The same parts as steps of a chained call (chain.go).
	chLimits  chainLimiter
	chQuota   chainQuota
	chEvents  chainEvents
	chHistory chainHistory
}

// New builds the pipeline.
func New(cfg Config) (*Service, error) {
	if cfg.Accounts == nil || cfg.Limits == nil || cfg.Quota == nil || cfg.Feeds == nil {
		return nil, errors.New("checks: Accounts, Limits, Quota and Feeds are required")
	}
	s := &Service{
		accounts: cfg.Accounts, limits: cfg.Limits, quota: cfg.Quota, feeds: cfg.Feeds,
		store: cfg.Store, tokens: cfg.Tokens, netTokens: cfg.NetTokens, events: cfg.Events,
		visitorKey: cfg.VisitorKey, history: cfg.History, challenges: cfg.Challenges,
		traffic: cfg.Traffic, webhooks: cfg.Webhooks, recent: cfg.Recent, log: cfg.Logger,
	}
	if s.store == nil {
		s.store = alwaysAvailable{}
	}
	if inc, ok := cfg.Accounts.(Incomplete); ok {
		s.incomplete = inc
	}
	if s.tokens == nil {
		s.tokens = noTokens{}
	}
	if s.netTokens == nil {
		s.netTokens = noNetTokens{}
	}
	if s.events == nil {
		s.events = noEvents{}
	}
	if s.history == nil {
		s.history = noHistory{}
	}
	if s.challenges == nil {
		s.challenges = noChallenges{}
	}
	if s.traffic == nil {
		s.traffic = noTraffic{}
	}
	if s.webhooks == nil {
		s.webhooks = noWebhooks{}
	}
	if s.recent == nil {
		s.recent = noRecent{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.chainParts()
	return s, nil
}

// errOff is what a part that is turned off answers.
var errOff = errors.New("checks: not configured")

// The parts a Config leaves out: each one is its feature turned off.
type (
	alwaysAvailable struct{}
	noTokens        struct{}
	noNetTokens     struct{}
	noEvents        struct{}
	noHistory       struct{}
	noChallenges    struct{}
	noTraffic       struct{}
	noWebhooks      struct{}
	noRecent        struct{}
)

func (alwaysAvailable) Available() bool { return true }

func (noTokens) Verify(string, time.Time) (accesstoken.Claims, error) {
	return accesstoken.Claims{}, errOff
}

// Sign answers "": the collector's network call then fails (500).
func (noNetTokens) Sign(string, *nettoken.Facts) string { return "" }
func (noNetTokens) Verify(string, string) (nettoken.Facts, bool) {
	return nettoken.Facts{}, false
}

func (noEvents) Collect(events.Collected) (events.EventID, error) { return events.EventID{}, errOff }

// Resolve finds nothing: an unknown event is not an error.
func (noEvents) Resolve(events.Resolve) (events.Resolved, error) { return events.Resolved{}, nil }
func (noEvents) Peek(events.Resolve) (events.Resolved, error)    { return events.Resolved{}, errOff }

func (noHistory) Observe(devicehist.Observation) (devicehist.Facts, error) {
	return devicehist.Facts{}, nil
}

func (noChallenges) Issue(challenge.Issue) (challenge.Issued, error) {
	return challenge.Issued{}, errOff
}
func (noChallenges) Submit(challenge.Submit) (challenge.Submitted, error) {
	return challenge.Submitted{}, errOff
}

// Purge has nothing to delete.
func (noChallenges) Purge(string) error { return nil }

func (noTraffic) Record(traffic.Record)  {}
func (noWebhooks) Notify(*webhook.Event) {}
func (noRecent) Record(recent.Entry)     {}
