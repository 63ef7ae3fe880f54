// Package accounts owns account records and API keys. One actor serialises every
// change (admin traffic is rare) and writes it to storage before publishing it;
// requests authenticate against a read-only directory the actor keeps current,
// so the hot path never waits on the actor or on Pebble. In cluster mode
// (Config.Shared) a change is written to the cluster's shared configuration
// instead, and every node's actor installs it from there (Install), so the
// hot path stays local there too.
package accounts

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/internal/weborigin"
	"github.com/fraudd/fraudd/storage"
)

// KeyKind says which of an account's keys a credential is.
type KeyKind uint8

const (
	KeyLive     KeyKind = iota + 1 // current live key
	KeyLivePrev                    // previous live key, in its 24-hour grace
	KeyTest                        // personal test key
)

// String names the kind as the usage endpoint reports it (live or test).
func (k KeyKind) String() string {
	if k == KeyTest {
		return "test"
	}
	return "live"
}

// Grace is how long a rotated live key keeps working.
const Grace = 24 * time.Hour

// Key prefixes (ARCHITECTURE.md: Identity and secrets).
const (
	PrefixLive        = "sk_live_"
	PrefixTest        = "sk_test_"
	PrefixPublishable = "pk_live_"
	PrefixWebhook     = "whsec_"
)

// Plans accepted by the admin API.
var Plans = []string{"free", "starter", "growth", "scale", "custom", "public_interest"}

// ValidPlan reports whether p is a known plan name.
func ValidPlan(p string) bool {
	for _, x := range Plans {
		if x == p {
			return true
		}
	}
	return false
}

// Errors the admin surface maps to statuses.
var (
	ErrNotFound = errors.New("account not found")
	ErrExists   = errors.New("email already registered")
	ErrNoPrev   = errors.New("no previous live key")
	// ErrConflict: cluster mode, another node changed the account between
	// this node's read and its write (the revision check refused it). The
	// admin API answers 409; reading the account again and retrying works.
	ErrConflict = errors.New("the account changed on another node")
	// ErrUnavailable: the account store cannot be read or written (SPEC §7:
	// 503 storage_unavailable); errors of every method wrap it then.
	ErrUnavailable = storage.ErrUnavailable
)

// Rule is one custom rule of an account as the operator wrote it
// (ADMIN.md): a signal and its action. Pin is one exception pin, by IP or
// CIDR (canonical prefix form) or by visitor id. Both are validated with
// intel/score's ParseRule and ParsePin before they are set.
type (
	Rule = storage.Rule
	Pin  = storage.Pin
)

// View is an immutable snapshot of one account as requests see it. A change
// replaces the whole View; nobody mutates one in place.
type View struct {
	storage.Account
	// Origins are the account's origins as a browser's Origin header names
	// them (weborigin.Canonical), the form every check compares. They hide
	// Account.Origins, which holds them as stored: an older version kept
	// "https://shop.example:443" or a Unicode host as given, and those
	// never matched. The stored form is left alone (a record is rewritten
	// only by a change, and cluster mode's copies compare byte for byte);
	// an entry that cannot be read as an origin is kept as it is.
	Origins       []string
	AllowPrefixes []netip.Prefix
	Rules         []Rule
	Pins          []Pin
	// Policy is Rules and Pins parsed for the engine once per change, so
	// requests never re-parse them.
	Policy score.Policy
}

// Allowed reports whether addr may use the live key (true when no allowlist).
func (v *View) Allowed(addr netip.Addr) bool {
	// An account has no allowlist when its stored list is empty, not when
	// none of its entries parsed (publish skips those): that would turn an
	// allowlist into none and admit every address.
	if len(v.AllowPrefixes) == 0 && len(v.Allowlist) == 0 {
		return true
	}
	for _, p := range v.AllowPrefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// binding maps a key hash to its account.
type binding struct {
	accountID string
	kind      KeyKind
}

// Config wires the service.
type Config struct {
	DB     *storage.DB
	Master secrets.Master
	Clock  clock.Clock
	// Timeout bounds one change's round trip to the actor (admin requests
	// wait for it); 0 means 10 s. A change that times out may still be
	// applied afterwards.
	Timeout time.Duration
	// Logger reports stored records the service reads with a correction
	// (an origin it cannot canonicalise); nil means slog.Default().
	Logger *slog.Logger
	// Shared, set in cluster mode, is the configuration every node shares:
	// changes are written there instead of to DB, and come back to every
	// node (this one included) through Install. Nil: single node.
	Shared Shared
}

// Records are one account's stored configuration: the records the store
// holds, sealed and hashed as they are (never a clear key or secret).
type Records struct {
	Account *storage.Account
	Rules   []Rule
	Pins    []Pin
}

// Shared is a configuration store several nodes share (cluster mode). It
// writes with revision checks and returns only once this node installed the
// write (read-your-write). Errors wrap ErrExists, ErrNotFound, ErrConflict
// or ErrUnavailable.
type Shared interface {
	// Create stores a new account (no rules, no pins); ErrExists when its
	// email is taken.
	Create(a *storage.Account) error
	// Modify reads the account's current records, lets change edit them
	// (it may replace slices, never mutate them in place) and writes back
	// what changed, refused with ErrConflict when any of them changed in
	// between.
	Modify(id string, change func(r *Records) error) error
}

// Service is the typed client of the accounts actor plus the read directory.
type Service struct {
	cfg    Config
	actor  *actors.Shards // one shard: every change in arrival order
	calls  *actors.Calls[func() (any, error), any]
	pepper []byte
	sealer *secrets.Sealer
	hashes sync.Pool

	byKey sync.Map // [32]byte → binding; written only by the actor
	byID  sync.Map // account id → *View; written only by the actor
	keys  keyMemo  // hashes of keys that resolved; emptied on every binding change

	// unreadable counts the accounts of the shared configuration this
	// node could not decode (SetUnreadable, cluster mode).
	unreadable atomic.Int64
}

// SetUnreadable records how many accounts of the shared configuration this
// node could not decode (records of a newer build, or damaged): their keys
// are not bound here, so a key that resolves to nothing may be one of
// theirs (Incomplete).
func (s *Service) SetUnreadable(n int) { s.unreadable.Store(int64(n)) }

// Incomplete reports whether some accounts could not be read here, so a key
// that resolves to nothing cannot be called unknown.
func (s *Service) Incomplete() bool { return s.unreadable.Load() > 0 }

// call is the one message kind: the actor runs the change, so every change
// happens in its single goroutine, in arrival order.
type call = actors.Call[func() (any, error), any]

// changer runs changes. Its only state is in the store and in the published
// directory, which a change updates only after the store took it, so a
// restart after a panic has nothing to reload.
type changer struct{}

func (changer) Receive(c actor.Context) {
	if m, ok := c.Message().(*call); ok {
		m.Reply(m.Req())
	}
}

// Start loads every account from storage and spawns the actor.
func Start(root *actor.RootContext, cfg Config) (*Service, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	sealer, err := secrets.NewSealer(cfg.Master, secrets.LabelWebhookSecret)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg, pepper: cfg.Master.Derive(secrets.LabelAPIKeyPepper), sealer: sealer,
		calls: actors.NewCalls[func() (any, error), any](cfg.Timeout)}
	s.hashes.New = func() any { return &hasher{h: hmac.New(sha256.New, s.pepper), in: make([]byte, 0, 96)} }
	err = cfg.DB.Accounts(func(a *storage.Account) error {
		rules, err := cfg.DB.GetRules(a.ID)
		if err != nil {
			return err
		}
		pins, err := cfg.DB.GetPins(a.ID)
		if err != nil {
			return err
		}
		s.publish(a, rules, pins, nil)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load accounts: %w", err)
	}
	s.actor = actors.SpawnShards(root, 1, func(int) actor.Actor { return changer{} }, actors.Named("accounts"))
	return s, nil
}

// Stop ends the actor after the changes already queued.
func (s *Service) Stop() {
	_ = s.actor.Stop()
}

// StopBy is Stop waiting for the actor only until by (actors.StopWait).
func (s *Service) StopBy(by time.Time) error { return s.actor.StopBy(by) }

// run has the actor make a change and waits at most Config.Timeout for it
// (actors.ErrUnavailable after that, or at once while the actor is down).
func (s *Service) run(do func() (any, error)) (any, error) {
	c := s.calls.Get(do)
	s.actor.Send(0, c)
	return s.calls.Wait(c)
}

// hasher is a pooled HMAC with scratch space, so hashing a key on the request
// path allocates nothing.
type hasher struct {
	h   hash.Hash
	in  []byte
	sum [32]byte
}

// HashKey is the keyed hash under which a key is stored.
func (s *Service) HashKey(key string) [32]byte {
	hs := s.hashes.Get().(*hasher)
	hs.h.Reset()
	hs.in = append(hs.in[:0], key...)
	hs.h.Write(hs.in)
	hs.h.Sum(hs.sum[:0])
	out := hs.sum
	s.hashes.Put(hs)
	return out
}

// Auth is what a credential resolves to.
type Auth struct {
	View       *View
	Kind       KeyKind
	Generation uint32
}

// Authenticate resolves an API key at time now. The previous live key works
// until its grace ends.
func (s *Service) Authenticate(key string, now time.Time) (Auth, bool) {
	h, memo, seen := s.keys.get(key)
	if !memo {
		h = s.HashKey(key)
	}
	b, ok := s.byKey.Load(h)
	if !ok {
		return Auth{}, false
	}
	v := s.Get(b.(binding).accountID)
	if v == nil {
		return Auth{}, false
	}
	// The binding only names the account; which of its keys this is comes
	// from the view, one consistent snapshot. publish replaces the view
	// before the bindings, so while a rotation is published the binding of
	// the rotated key still says live when the view already holds it as the
	// previous key: trusting the binding's kind would refuse a key that
	// never stopped working. The constant-time compares also refuse a
	// binding left over from a record that has since changed.
	var (
		rec  *storage.KeyRecord
		kind KeyKind
	)
	switch {
	case subtle.ConstantTimeCompare(v.Live.Hash[:], h[:]) == 1:
		rec, kind = &v.Live, KeyLive
	case subtle.ConstantTimeCompare(v.Test.Hash[:], h[:]) == 1:
		rec, kind = &v.Test, KeyTest
	case v.PrevLive != nil && subtle.ConstantTimeCompare(v.PrevLive.Hash[:], h[:]) == 1:
		rec, kind = v.PrevLive, KeyLivePrev
		if !now.Before(rec.ValidUntil) {
			return Auth{}, false
		}
	default:
		return Auth{}, false
	}
	if !memo {
		s.keys.remember(seen, key, h)
	}
	return Auth{View: v, Kind: kind, Generation: rec.Generation}, true
}

// Get returns the current view of an account, or nil.
func (s *Service) Get(id string) *View {
	v, ok := s.byID.Load(id)
	if !ok {
		return nil
	}
	return v.(*View)
}

// ByPublishableKey finds the account of a publishable key, or nil.
func (s *Service) ByPublishableKey(pk string) *View {
	// Publishable keys are looked up by hash like secret ones.
	h, memo, seen := s.keys.get(pk)
	if !memo {
		h = s.HashKey(pk)
	}
	b, ok := s.byKey.Load(h)
	if !ok {
		return nil
	}
	out := s.Get(b.(binding).accountID)
	if out != nil && !memo {
		s.keys.remember(seen, pk, h)
	}
	return out
}

// Range calls fn for every account until it returns false.
func (s *Service) Range(fn func(*View) bool) {
	s.byID.Range(func(_, v any) bool { return fn(v.(*View)) })
}

// publish makes a stored account visible to requests. old is the view it
// replaces (nil when new): key bindings that no longer exist are removed.
func (s *Service) publish(a *storage.Account, rules []storage.Rule, pins []storage.Pin, old *View) *View {
	v := &View{Account: *a, Rules: rules, Pins: pins, Origins: s.canonicalOrigins(a)}
	for _, p := range a.Allowlist {
		if pr, err := netip.ParsePrefix(p); err == nil {
			v.AllowPrefixes = append(v.AllowPrefixes, pr)
		}
	}
	v.Policy = CompilePolicy(rules, pins)
	s.byID.Store(a.ID, v)
	s.byKey.Store(a.Live.Hash, binding{a.ID, KeyLive})
	s.byKey.Store(a.Test.Hash, binding{a.ID, KeyTest})
	if a.PrevLive != nil {
		s.byKey.Store(a.PrevLive.Hash, binding{a.ID, KeyLivePrev})
	}
	if a.PublishableKey != "" {
		s.byKey.Store(s.HashKey(a.PublishableKey), binding{a.ID, 0})
	}
	if old != nil {
		keep := map[[32]byte]bool{a.Live.Hash: true, a.Test.Hash: true}
		if a.PrevLive != nil {
			keep[a.PrevLive.Hash] = true
		}
		for _, h := range []*storage.KeyRecord{&old.Live, &old.Test, old.PrevLive} {
			if h != nil && !keep[h.Hash] {
				s.byKey.Delete(h.Hash)
			}
		}
	}
	// After the bindings changed: a request that read a binding now gone
	// finds the memo replaced and does not remember its key.
	s.keys.forget()
	return v
}

// canonicalOrigins is a's stored origins in the form requests compare
// (View.Origins); the stored slice itself when it already is.
func (s *Service) canonicalOrigins(a *storage.Account) []string {
	var out []string
	for i, o := range a.Origins {
		c, ok := weborigin.Canonical(o)
		if !ok {
			// Never dropped: an entry the account lists keeps confining
			// its key, even one this version cannot read.
			s.cfg.Logger.Warn("accounts: a stored origin is not one this version can read; kept as it is, set the account's origins again to correct it",
				"account", a.ID, "origin", o)
			c = o
		}
		if c != o && out == nil {
			out = make([]string, len(a.Origins))
			copy(out, a.Origins[:i])
		}
		if out != nil {
			out[i] = c
		}
	}
	if out == nil {
		return a.Origins
	}
	return out
}

func (s *Service) newKey(prefix string, gen uint32, now time.Time) (string, storage.KeyRecord) {
	k := prefix + secrets.Random62(32)
	return k, storage.KeyRecord{Hash: s.HashKey(k), Prefix: prefix, Last4: k[len(k)-4:], Generation: gen, CreatedAt: now}
}

// NewAccount is the input of Create.
type NewAccount struct {
	Email        string
	Plan         string
	CreatedAt    time.Time // zero = now
	HourlyLimit  *int64
	MonthlyLimit *int64
}

// Created is an account with its secrets, shown once.
type Created struct {
	View           *View
	LiveKey        string
	TestKey        string
	PublishableKey string
	WebhookSecret  string
}

// Create makes an account with fresh keys. The email must be unused.
func (s *Service) Create(in NewAccount) (*Created, error) {
	if s.cfg.Shared != nil {
		// Cluster mode: the records are written to the shared store, which
		// checks the email across the cluster; this node publishes them
		// when Install brings them back, before Shared.Create returns.
		a, out := s.newAccount(in)
		if err := s.cfg.Shared.Create(a); err != nil {
			return nil, err
		}
		if out.View = s.Get(a.ID); out.View == nil {
			return nil, fmt.Errorf("create account %s: written but not installed: %w", a.ID, ErrUnavailable)
		}
		return out, nil
	}
	v, err := s.run(func() (any, error) {
		a, out := s.newAccount(in)
		if err := s.cfg.DB.CreateAccount(a); err != nil {
			if errors.Is(err, storage.ErrExists) {
				return nil, ErrExists
			}
			return nil, fmt.Errorf("create account: %w", err)
		}
		out.View = s.publish(a, nil, nil, nil)
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*Created), nil
}

// newAccount makes a new account's record and its secrets in clear (shown
// once, in Created).
func (s *Service) newAccount(in NewAccount) (*storage.Account, *Created) {
	now := s.cfg.Clock.Now()
	created := in.CreatedAt
	if created.IsZero() {
		created = now
	}
	a := &storage.Account{
		ID: "acc_" + secrets.Random62(12), Email: in.Email, Plan: in.Plan, CreatedAt: created.UTC(),
		HourlyLimit: in.HourlyLimit, MonthlyLimit: in.MonthlyLimit,
	}
	out := &Created{}
	out.LiveKey, a.Live = s.newKey(PrefixLive, 1, now)
	out.TestKey, a.Test = s.newKey(PrefixTest, 1, now)
	out.PublishableKey = PrefixPublishable + secrets.Random62(24)
	a.PublishableKey = out.PublishableKey
	out.WebhookSecret = PrefixWebhook + secrets.Random62(24)
	a.WebhookSecret = s.sealer.Seal([]byte(out.WebhookSecret))
	return a, out
}

// update runs change on a copy of the account, stores it, and publishes it.
func (s *Service) update(id string, change func(a *storage.Account, now time.Time) (any, error)) (any, error) {
	if s.cfg.Shared != nil {
		var out any
		err := s.cfg.Shared.Modify(id, func(r *Records) error {
			var err error
			out, err = change(r.Account, s.cfg.Clock.Now())
			return err
		})
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = s.Get(id)
		}
		return out, nil
	}
	return s.run(func() (any, error) {
		old := s.Get(id)
		if old == nil {
			return nil, ErrNotFound
		}
		a := old.Account // copy; slices are replaced, never mutated
		if a.PrevLive != nil {
			p := *a.PrevLive
			a.PrevLive = &p
		}
		out, err := change(&a, s.cfg.Clock.Now())
		if err != nil {
			return nil, err
		}
		if err := s.cfg.DB.PutAccount(&a); err != nil {
			return nil, fmt.Errorf("store account: %w", err)
		}
		v := s.publish(&a, old.Rules, old.Pins, old)
		if out == nil {
			out = v
		}
		return out, nil
	})
}

// Patch is a partial account update; nil fields are left alone.
type Patch struct {
	Plan               *string
	HourlyLimit        **int64
	MonthlyLimit       **int64
	Suspended          *bool
	Allowlist          *[]string
	Origins            *[]string
	DeviceEvidenceBeta *bool
}

// Update applies a patch and returns the new view.
func (s *Service) Update(id string, p Patch) (*View, error) {
	_, err := s.update(id, func(a *storage.Account, _ time.Time) (any, error) {
		if p.Plan != nil {
			a.Plan = *p.Plan
		}
		if p.HourlyLimit != nil {
			a.HourlyLimit = *p.HourlyLimit
		}
		if p.MonthlyLimit != nil {
			a.MonthlyLimit = *p.MonthlyLimit
		}
		if p.Suspended != nil {
			a.Suspended = *p.Suspended
		}
		if p.Allowlist != nil {
			a.Allowlist = *p.Allowlist
		}
		if p.Origins != nil {
			a.Origins = *p.Origins
		}
		if p.DeviceEvidenceBeta != nil {
			a.DeviceEvidenceBeta = *p.DeviceEvidenceBeta
		}
		// The caller checked the limits against the plan it read before
		// this write; another patch may have changed the plan since. The
		// limits are the custom plan's own, so they are settled here
		// against the plan being written: a fixed plan set by this patch
		// drops them, and a limit checked against a custom plan that is
		// one no longer is refused rather than stored unenforced.
		if p.Plan != nil && a.Plan != PlanCustom {
			a.HourlyLimit, a.MonthlyLimit = nil, nil
		}
		if a.Plan != PlanCustom && (setsLimit(p.HourlyLimit) || setsLimit(p.MonthlyLimit)) {
			return nil, fmt.Errorf("account %s: plan changed to %s meanwhile, which takes no limits: %w", id, a.Plan, ErrConflict)
		}
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return s.written(id)
}

// PlanCustom is the plan whose hourly and monthly limits are the account's
// own (Patch.HourlyLimit, Patch.MonthlyLimit).
const PlanCustom = "custom"

// setsLimit: a patch field that sets a limit (not one that leaves it
// alone or clears it).
func setsLimit(l **int64) bool { return l != nil && *l != nil }

// Rotated is the answer of a live-key rotation.
type Rotated struct {
	Key                string
	PreviousValidUntil time.Time
}

// RotateLive issues a new live key; the old one enters a 24-hour grace, and a
// key already in grace from an earlier rotation ends at once.
func (s *Service) RotateLive(id string) (Rotated, error) {
	v, err := s.update(id, func(a *storage.Account, now time.Time) (any, error) {
		prev := a.Live
		prev.ValidUntil = now.Add(Grace)
		a.PrevLive = &prev
		var key string
		key, a.Live = s.newKey(PrefixLive, prev.Generation+1, now)
		return Rotated{Key: key, PreviousValidUntil: prev.ValidUntil}, nil
	})
	if err != nil {
		return Rotated{}, err
	}
	return v.(Rotated), nil
}

// RevokePrevious ends the previous live key's grace at once.
func (s *Service) RevokePrevious(id string) error {
	_, err := s.update(id, func(a *storage.Account, _ time.Time) (any, error) {
		a.PrevLive = nil
		return nil, nil
	})
	return err
}

// RotateTest replaces the test key; the old one stops at once.
func (s *Service) RotateTest(id string) (string, error) {
	v, err := s.update(id, func(a *storage.Account, now time.Time) (any, error) {
		var key string
		key, a.Test = s.newKey(PrefixTest, a.Test.Generation+1, now)
		return key, nil
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

// SetWebhookURL sets or clears (empty string) the webhook URL.
func (s *Service) SetWebhookURL(id, url string) (*View, error) {
	_, err := s.update(id, func(a *storage.Account, _ time.Time) (any, error) {
		a.WebhookURL = url
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return s.written(id)
}

// written is id's view after a write to it. In cluster mode another
// member may delete the account between the write and this read (its
// delete installed here first): that answers ErrNotFound, not a nil view
// for the caller to render.
func (s *Service) written(id string) (*View, error) {
	if v := s.Get(id); v != nil {
		return v, nil
	}
	return nil, fmt.Errorf("account %s deleted meanwhile: %w", id, ErrNotFound)
}

// RotateWebhookSecret replaces the signing secret; deliveries use it at once.
func (s *Service) RotateWebhookSecret(id string) (string, error) {
	v, err := s.update(id, func(a *storage.Account, _ time.Time) (any, error) {
		sec := PrefixWebhook + secrets.Random62(24)
		a.WebhookSecret = s.sealer.Seal([]byte(sec))
		return sec, nil
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

// WebhookSecret returns the account's current signing secret in clear.
func (s *Service) WebhookSecret(v *View) (string, error) {
	b, err := s.sealer.Open(v.WebhookSecret)
	if err != nil {
		return "", fmt.Errorf("webhook secret of %s: %w", v.ID, err)
	}
	return string(b), nil
}

// SetRules replaces the account's rule set (already validated by the caller).
func (s *Service) SetRules(id string, rules []Rule) (*View, error) {
	return s.setPolicy(id, func(r *Records) { r.Rules = rules })
}

// SetPins replaces the account's exception pins (already validated).
func (s *Service) SetPins(id string, pins []Pin) (*View, error) {
	return s.setPolicy(id, func(r *Records) { r.Pins = pins })
}

func (s *Service) setPolicy(id string, edit func(r *Records)) (*View, error) {
	if s.cfg.Shared != nil {
		if err := s.cfg.Shared.Modify(id, func(r *Records) error { edit(r); return nil }); err != nil {
			return nil, err
		}
		return s.written(id)
	}
	v, err := s.run(func() (any, error) {
		old := s.Get(id)
		if old == nil {
			return nil, ErrNotFound
		}
		r := Records{Rules: old.Rules, Pins: old.Pins}
		edit(&r)
		var err error
		if !slices.Equal(r.Rules, old.Rules) {
			err = s.cfg.DB.PutRules(id, r.Rules)
		}
		if err == nil && !slices.Equal(r.Pins, old.Pins) {
			err = s.cfg.DB.PutPins(id, r.Pins)
		}
		if err != nil {
			return nil, fmt.Errorf("store policy: %w", err)
		}
		a := old.Account
		return s.publish(&a, r.Rules, r.Pins, old), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*View), nil
}

// Install makes recs this node's copy of those accounts, as they are, and
// removes the accounts named in gone: cluster mode applies what the shared
// configuration delivered this way, through the actor like any change. An
// account whose records equal the published ones is left alone, so a full
// re-read of the shared store rewrites nothing.
func (s *Service) Install(recs []Records, gone []string) error {
	_, err := s.run(func() (any, error) {
		for _, r := range recs {
			old := s.Get(r.Account.ID)
			if old != nil && sameRecords(old, r) {
				continue
			}
			oldEmail := ""
			if old != nil {
				oldEmail = old.Email
			}
			if err := s.cfg.DB.ReplaceAccount(r.Account, r.Rules, r.Pins, oldEmail); err != nil {
				return nil, fmt.Errorf("install account %s: %w", r.Account.ID, err)
			}
			s.publish(r.Account, r.Rules, r.Pins, old)
		}
		for _, id := range gone {
			old := s.Get(id)
			if old == nil {
				continue
			}
			if err := s.cfg.DB.DeleteAccount(id, old.Email); err != nil {
				return nil, fmt.Errorf("remove account %s: %w", id, err)
			}
			s.unpublish(old)
		}
		return nil, nil
	})
	return err
}

func sameRecords(v *View, r Records) bool {
	return bytes.Equal(storage.MarshalAccount(nil, &v.Account), storage.MarshalAccount(nil, r.Account)) &&
		bytes.Equal(storage.MarshalRules(nil, v.Rules), storage.MarshalRules(nil, r.Rules)) &&
		bytes.Equal(storage.MarshalPins(nil, v.Pins), storage.MarshalPins(nil, r.Pins))
}

// unpublish removes an account and every key binding of it.
func (s *Service) unpublish(v *View) {
	defer s.keys.forget() // after the bindings went (see publish)
	for _, k := range []*storage.KeyRecord{&v.Live, &v.Test, v.PrevLive} {
		if k == nil {
			continue
		}
		if b, ok := s.byKey.Load(k.Hash); ok && b.(binding).accountID == v.ID {
			s.byKey.Delete(k.Hash)
		}
	}
	if v.PublishableKey != "" {
		h := s.HashKey(v.PublishableKey)
		if b, ok := s.byKey.Load(h); ok && b.(binding).accountID == v.ID {
			s.byKey.Delete(h)
		}
	}
	s.byID.Delete(v.ID)
}

// CompilePolicy parses stored rules and pins into the engine's form. They were
// validated when set, so an entry that no longer parses (a signal retired in a
// later version) is skipped rather than failing the account.
func CompilePolicy(rules []storage.Rule, pins []storage.Pin) score.Policy {
	var p score.Policy
	for _, r := range rules {
		if sr, err := score.ParseRule(r.Signal, r.Action); err == nil {
			p.Rules = append(p.Rules, sr)
		}
	}
	for _, x := range pins {
		if sp, err := score.ParsePin(x.IP, x.VisitorID, x.Action, x.Label); err == nil {
			p.Pins = append(p.Pins, sp)
		}
	}
	return p
}

// ResolveToken authenticates an OAuth access token's binding: the account and
// the generation of the key it was minted from. A live token works while its
// key is current or in grace; a test token while its test key is current.
func (s *Service) ResolveToken(accountID string, test bool, gen uint32, now time.Time) (Auth, bool) {
	v := s.Get(accountID)
	if v == nil {
		return Auth{}, false
	}
	switch {
	case test && gen == v.Test.Generation:
		return Auth{View: v, Kind: KeyTest, Generation: gen}, true
	case !test && gen == v.Live.Generation:
		return Auth{View: v, Kind: KeyLive, Generation: gen}, true
	case !test && v.PrevLive != nil && gen == v.PrevLive.Generation && now.Before(v.PrevLive.ValidUntil):
		return Auth{View: v, Kind: KeyLivePrev, Generation: gen}, true
	}
	return Auth{}, false
}
