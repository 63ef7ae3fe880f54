package challenge

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/intel/evidence"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// Limits (SPEC §8 "Device evidence beta").
const (
	TTL            = 2 * time.Minute
	MaxOutstanding = 50
	PerHour        = 60
	Window         = time.Hour
	MaxDevices     = 200
	Retention      = 30 * 24 * time.Hour
	Cooldown       = 30 * time.Second
	// EventMaxAge is how old a device event may be when a challenge is issued.
	EventMaxAge = 5 * time.Minute
	// BurstWindow and BurstProfiles: this many distinct browser profiles from
	// one device within the window is antidetect_profile_burst.
	BurstWindow   = 10 * time.Minute
	BurstProfiles = 3
	// storePruneEvery is how often a shard drops its customers' stored
	// samples past Retention, resident or not.
	storePruneEvery = time.Hour
	// maxReadings bounds the computation hashes kept per account id.
	maxReadings = 16
)

var (
	// ErrStopped is returned after Stop.
	ErrStopped = fmt.Errorf("challenge: stopped: %w", actors.ErrUnavailable)
	// ErrOutstanding: MaxOutstanding challenges are unexpired and unused (409).
	ErrOutstanding = errors.New("challenge: too many outstanding challenges")
)

// RateLimited is Issue's error at PerHour challenges in the last hour (429).
type RateLimited struct{ RetryAfter time.Duration }

func (e *RateLimited) Error() string { return "challenge: hourly challenge limit reached" }

// Config configures New.
type Config struct {
	Shards int
	// Key keys every hash kept (device, account, readings). Required in
	// production; nil uses a random per-process key.
	Key     []byte
	Timeout time.Duration
	Logger  *slog.Logger
	// Store keeps the GPU samples sealed (AES-GCM under a key derived from
	// Key); nil: memory only. Challenges and consistency hashes are memory
	// only: a restart expires every challenge.
	Store Store
	// Clock stamps the periodic sweep that drops expired state and idle
	// customers; nil: no automatic sweeps (Sweep can still be called).
	Clock clock.Clock
	// SweepEvery is the sweep interval; 0 means one minute.
	SweepEvery time.Duration
}

// Store is where GPU samples live; *storage.DB implements it.
type Store interface {
	PutGPUSample(aead cipher.AEAD, s *storage.GPUSample) error
	LoadGPUSamples(aead cipher.AEAD, customer string, notBefore time.Time) ([]storage.GPUSample, error)
	DeleteGPUSample(customer string, device [16]byte) error
	DeleteGPUSamples(customer string) error
	PruneGPUSamples(before time.Time, mine func(customer string) bool) error
}

// Issue asks for a challenge bound to customer, event and device.
type Issue struct {
	Customer string
	Event    string
	Device   string // visitor id of the event ("" when none)
	Now      time.Time
}

// Issued is Issue's answer.
type Issued struct {
	Challenge string
	Expires   time.Time
}

// GPU statuses (SPEC 2.2 device.gpu_evidence).
const (
	StatusRecorded      = "recorded"
	StatusDisabled      = "disabled"
	StatusInvalid       = "invalid"
	StatusExpiredOrUsed = "expired_or_used"
	StatusNotSaved      = "not_saved"
	StatusUnavailable   = "unavailable"
	StatusReplay        = "replay"
)

// Submit consumes a challenge and records the evidence it carries: exactly
// one of GPU and Browser is set.
type Submit struct {
	Customer  string
	Event     string
	Device    string
	Challenge string
	AccountID string // the evaluation's accountId, "" when none
	GPU       *[evidence.Features]float32
	Browser   *evidence.Browser
	Now       time.Time
	// Peek reads without changing anything: the challenge stays unused and
	// nothing is recorded or remembered. The personal test key's
	// evaluations peek, since test traffic must show in no later answer
	// (SPEC 2.2 customer_history "excludes test-key traffic") and the one-use
	// challenge is the live key's (SPEC 4.10, 5.2).
	Peek bool
}

// Submitted is Submit's answer.
type Submitted struct {
	// Accepted: the challenge was live and matched; it is now used.
	Accepted bool
	// Status is the GPU status (recorded, not_saved, expired_or_used), or for
	// browser evidence "" when accepted and "replay" when not.
	Status     string
	Nearest    string // another device of the customer (visitor id), GPU only
	RMS        float64
	HasNearest bool
	// Browser findings.
	Randomization bool
	ProfileBurst  bool
}

type (
	issueCall  = actors.Call[Issue, Issued]
	submitCall = actors.Call[Submit, Submitted]
	purgeCall  = actors.Call[string, struct{}]
	countCall  = actors.Call[string, Counts]
)

// Counts is what a customer holds (tests, admin).
type Counts struct{ Challenges, Devices, Accounts int }

// Client is the typed client; safe for concurrent use.
type Client struct {
	root    *actor.RootContext
	shards  *actors.Shards
	issues  *actors.Calls[Issue, Issued]
	submits *actors.Calls[Submit, Submitted]
	purges  *actors.Calls[string, struct{}]
	counts  *actors.Calls[string, Counts]
	stopped atomic.Bool
	states  []*shardState // tests read them only after a reply from the shard
}

// New spawns the shards.
func New(root *actor.RootContext, cfg Config) *Client {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	key := cfg.Key
	if len(key) == 0 {
		key = make([]byte, 32)
		rand.Read(key)
	}
	c := &Client{
		root:    root,
		issues:  actors.NewCalls[Issue, Issued](cfg.Timeout),
		submits: actors.NewCalls[Submit, Submitted](cfg.Timeout),
		purges:  actors.NewCalls[string, struct{}](cfg.Timeout),
		counts:  actors.NewCalls[string, Counts](cfg.Timeout),
	}
	blk, err := aes.NewCipher(keyed32(key, "gpu-sample-seal"))
	if err != nil {
		panic(err) // a 32-byte key always makes a cipher
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		panic(err)
	}
	n := actors.ShardCount(cfg.Shards)
	fresh := func(i int) *shardState {
		return &shardState{customers: actors.NewTable[string, *customer](64), key: key, log: cfg.Logger,
			store: cfg.Store, aead: aead, purged: map[string]bool{}, index: uint64(i), mask: uint64(n - 1)}
	}
	states := make([]*shardState, n)
	for i := range states {
		states[i] = fresh(i)
	}
	c.states = states
	opts := []actors.ShardOption{actors.Named("challenge"), actors.WithLogger(cfg.Logger)}
	if cfg.Store != nil {
		// After a panic the shard starts empty, as after a process restart:
		// GPU samples load from the store on first touch; outstanding
		// challenges and consistency hashes, which live in memory only,
		// are gone (a new challenge is one request away).
		opts = append(opts, actors.OnRestart(func(i int) { states[i] = fresh(i) }))
	}
	c.shards = actors.SpawnShards(root, n, func(i int) actor.Actor { return shard{states[i]} }, opts...)
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = time.Minute
	}
	c.shards.Tick(cfg.Clock, cfg.SweepEvery)
	return c
}

// Sweep drops expired state and customers that hold nothing as of now
// (fire-and-forget).
func (c *Client) Sweep(now time.Time) {
	if !c.stopped.Load() {
		c.shards.Broadcast(actors.Tick{Now: now})
	}
}

func route(customer string) uint64 { return actors.HashString(customer) }

// Issue issues a challenge. Errors: ErrOutstanding, *RateLimited, ErrStopped,
// actors.ErrTimeout.
func (c *Client) Issue(m Issue) (Issued, error) {
	if c.stopped.Load() {
		return Issued{}, ErrStopped
	}
	call := c.issues.Get(m)
	c.shards.Send(route(m.Customer), call)
	return c.issues.Wait(call)
}

// Submit consumes a challenge and records its evidence in one hop.
func (c *Client) Submit(m Submit) (Submitted, error) {
	if c.stopped.Load() {
		return Submitted{}, ErrStopped
	}
	call := c.submits.Get(m)
	c.shards.Send(route(m.Customer), call)
	return c.submits.Wait(call)
}

// Purge deletes everything kept for customer (the beta was disabled), the
// stored samples included. Purging again before the customer keeps anything
// new costs nothing.
func (c *Client) Purge(customer string) error {
	if c.stopped.Load() {
		return ErrStopped
	}
	call := c.purges.Get(customer)
	c.shards.Send(route(customer), call)
	_, err := c.purges.Wait(call)
	return err
}

func keyed32(key []byte, label string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// Counts reports what customer holds.
func (c *Client) Counts(customer string) (Counts, error) {
	if c.stopped.Load() {
		return Counts{}, ErrStopped
	}
	call := c.counts.Get(customer)
	c.shards.Send(route(customer), call)
	return c.counts.Wait(call)
}

// Stop stops the shards after the messages already sent.
func (c *Client) Stop() error { return c.StopBy(time.Time{}) }

// StopBy is Stop waiting for the shards only until by (actors.StopWait).
func (c *Client) StopBy(by time.Time) error {
	if c.stopped.Swap(true) {
		return nil
	}
	return c.shards.StopBy(by)
}

// NewChallenge returns 64 lowercase hex characters of crypto randomness.
func NewChallenge() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// digest is a keyed 16-byte hash.
type digest [16]byte

func keyed(key []byte, kind string, parts ...[]byte) digest {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(kind))
	for _, p := range parts {
		var l [4]byte
		l[0], l[1], l[2], l[3] = byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
		m.Write(l[:])
		m.Write(p)
	}
	var d digest
	copy(d[:], m.Sum(nil))
	return d
}
