// Package webhook delivers signed threat alerts (SPEC §6). Shard actors, keyed
// by account id, own each account's delivery queue: an event is tried up to
// three times, the retries about 1 and 8 minutes after the end of the failed
// attempt by the service clock (a periodic tick compares due times with the
// clock, so the test clock moves retries too); a 2xx ends it. Every attempt
// reads the account's current URL and signing secret, so a rotated secret
// applies at once. Attempts run on their own goroutines and report back to
// the shard, which logs each one in storage (the 25 most recent per account
// are listed, 30 days at most) and emails the owner once when 5 events in a
// row failed every attempt.
//
// Deliveries survive a restart: an event is stored (storage.PendingHook) when
// it is queued and again after each failed attempt that will be retried, with
// the attempts made and the next one's due time, and deleted when its
// delivery ends. New resumes every stored event on its schedule; an attempt a
// crash interrupted is made again (receivers dedupe on event_id, SPEC §6). A
// shard that restarts after a panic reloads its accounts' pending events the
// same way; attempts still running then report back to the new shard.
//
// A test event (SendTest, the operator's POST …/webhook/test) is queued only
// once its pending record is stored, and SendTest waits for that: while the
// store is unavailable it fails with ErrUnavailable (the edge's 503) and
// nothing is sent, since the 202 promises a delivery that survives a restart
// and whose attempts are listed. A threat event, which nobody waits for, is
// still tried from memory when it cannot be stored.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// Delivery is one logged delivery attempt, as Recent lists it (the admin
// list names it without importing the store).
type Delivery = storage.Delivery

// Delivery limits (SPEC §6, §8).
const (
	MaxAttempts = 3
	Timeout     = 10 * time.Second
	// ListLen is how many deliveries the admin list shows; Retention how
	// long they are kept.
	ListLen   = 25
	Retention = 30 * 24 * time.Hour
	// FailureStreak is how many events in a row must fail every attempt
	// before the owner is emailed.
	FailureStreak = 5
)

// ErrUnavailable is wrapped by SendTest's error when the test event could
// not be stored: nothing was queued or sent, and the caller may retry.
var ErrUnavailable = storage.ErrUnavailable

// ErrQueueFull is SendTest's error when the account already has maxQueued
// events waiting or retrying: the test event was dropped, as any would be.
var ErrQueueFull = errors.New("webhook: the account's queue is full")

// Backoff[i] is the wait after failed attempt i+1, counted from its end.
var Backoff = [MaxAttempts - 1]time.Duration{time.Minute, 8 * time.Minute}

const (
	// maxInFlight bounds one account's concurrent attempts.
	maxInFlight = 4
	// maxQueued bounds one account's events waiting or retrying; more are
	// dropped (and counted in the log) rather than growing memory.
	maxQueued = 1000
	// idleAfter is how long an account with nothing pending stays in memory.
	idleAfter = 10 * time.Minute
	// pruneEvery is how often (service clock) expired deliveries are deleted.
	pruneEvery = time.Hour
)

// Accounts is what deliveries need to know about an account, read afresh at
// every attempt. *accounts.Service implements it.
type Accounts interface {
	Get(id string) *accounts.View
	WebhookSecret(v *accounts.View) (string, error)
}

// Mailer sends the failure notice. *mailer.Mailer implements it.
type Mailer interface {
	Send(mailer.Message)
}

// Config configures New.
type Config struct {
	Accounts Accounts
	DB       *storage.DB // nil: no delivery log
	Mail     Mailer      // nil: no failure notice
	Clock    clock.Clock
	Logger   *slog.Logger
	// AllowPrivate also allows http:// receivers and loopback or private
	// addresses (--allow-private-webhooks; development and tests).
	AllowPrivate bool
	// Timeout bounds one attempt; 0 means 10 s.
	Timeout time.Duration
	// TickEvery is how often due retries are looked for; 0 means 1 s.
	TickEvery time.Duration
	// Shards is the shard count (see actors.ShardCount).
	Shards    int
	UserAgent string // default "fraudd-webhooks/1"
}

// Service is the typed client of the webhook shards.
type Service struct {
	cfg    Config
	client *http.Client
	shards *actors.Shards
	states []*shard // the shard actors; replaced when one restarts
	mask   uint64   // shard index = HashString(account) & mask
	ctx    context.Context
	cancel context.CancelFunc
	// flights are the attempts running, by event id. A restarted shard
	// finds its accounts' running attempts here instead of starting them
	// again, and an attempt's result counts only while its entry is here.
	flights sync.Map // event id → *flight
	// outcomes counts finished attempts: delivered, retrying, failed.
	outcomes [3]atomic.Uint64
	// dropped counts the events dropped because their account had
	// maxQueued waiting or retrying.
	dropped atomic.Uint64
	// attempts are the attempt goroutines running; Stop waits for them.
	attempts sync.WaitGroup
	// tests carries SendTest's queued event to its shard and the store's
	// answer back.
	tests *actors.Calls[*queued, struct{}]
}

// Outcomes counts the attempts finished so far: delivered (2xx), retrying
// (failed, another attempt scheduled) and failed (the last attempt failed).
func (s *Service) Outcomes() (delivered, retrying, failed uint64) {
	return s.outcomes[0].Load(), s.outcomes[1].Load(), s.outcomes[2].Load()
}

// Dropped counts the events never queued because their account had
// maxQueued events waiting or retrying.
func (s *Service) Dropped() uint64 { return s.dropped.Load() }

// flight is one running attempt.
type flight struct {
	account string
	ev      *event
	started time.Time // wall clock
}

// New spawns the shards, resumes the deliveries a previous run left pending
// in the store, and starts the tick. It fails when a stored delivery cannot
// be read back.
func New(root *actor.RootContext, cfg Config) (*Service, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = Timeout
	}
	if cfg.TickEvery <= 0 {
		cfg.TickEvery = time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "fraudd-webhooks/1"
	}
	s := &Service{cfg: cfg, client: newClient(cfg.Timeout, cfg.AllowPrivate), tests: actors.NewCalls[*queued, struct{}](0)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	n := actors.ShardCount(cfg.Shards)
	s.mask = uint64(n - 1)
	s.states = make([]*shard, n)
	for i := range s.states {
		s.states[i] = s.newShard(i)
	}
	opts := []actors.ShardOption{actors.Named("webhook"), actors.WithLogger(cfg.Logger)}
	if cfg.DB != nil {
		now := cfg.Clock.Now()
		resumed, err := s.loadPending(func(acc string) *shard { return s.states[actors.HashString(acc)&s.mask] }, now)
		if err != nil {
			s.cancel()
			return nil, fmt.Errorf("resume pending webhook deliveries: %w", err)
		}
		if resumed > 0 {
			cfg.Logger.Info("webhook deliveries resumed", "pending", resumed)
		}
		// After a panic the shard's queues may be half-changed: it starts
		// afresh from the store, which holds every pending event.
		opts = append(opts, actors.OnRestart(func(i int) {
			if old := s.states[i]; old.preparing != nil {
				// The panic came while this event's attempt was being
				// prepared: resumed, it would crash the shard again.
				cfg.Logger.Error("webhook event dropped: preparing it crashed the shard",
					"account", old.preparingFor, "event_id", old.preparing.id)
				old.forget(old.preparingFor, old.preparing)
			}
			sh := s.newShard(i)
			if _, err := s.loadPending(func(acc string) *shard {
				if int(actors.HashString(acc)&s.mask) == i {
					return sh
				}
				return nil
			}, cfg.Clock.Now()); err != nil {
				cfg.Logger.Error("webhook: pending deliveries not reloaded after a restart", "shard", i, "err", err)
			}
			s.states[i] = sh
		}))
	}
	s.shards = actors.SpawnShards(root, n, func(i int) actor.Actor { return s.states[i] }, opts...)
	s.shards.Tick(cfg.Clock, cfg.TickEvery)
	return s, nil
}

func (s *Service) newShard(i int) *shard {
	return &shard{svc: s, index: i, accts: actors.NewTable[string, *acct](16)}
}

// loadPending hands every stored pending event to the shard state into
// returns for its account (nil: not this one) and reports how many it handed.
// They wait for the next tick, which starts those that are due.
func (s *Service) loadPending(into func(account string) *shard, now time.Time) (int, error) {
	n := 0
	err := s.cfg.DB.PendingHooks(func(p *storage.PendingHook) error {
		if sh := into(p.Account); sh != nil {
			sh.resume(p, now)
			n++
		}
		return nil
	})
	return n, err
}

// AllowPrivate reports whether private receivers are allowed.
func (s *Service) AllowPrivate() bool { return s.cfg.AllowPrivate }

// Notify queues a threat.detected event, fire-and-forget. ev must not be
// changed afterwards.
func (s *Service) Notify(ev *Event) {
	s.shards.Send(actors.HashString(ev.Account), &queued{kind: KindThreat, id: NewEventID(), ev: ev})
}

// SendTest queues a test event with sample values and returns its id, once
// the event is stored as pending. An error wrapping ErrUnavailable means the
// store could not take it: the event was neither queued nor sent. One
// wrapping actors.ErrUnavailable means the shard did not answer (down,
// stopping, or not in time).
func (s *Service) SendTest(account string, now time.Time) (string, error) {
	id := NewEventID()
	c := s.tests.Get(&queued{kind: KindTest, id: id, ev: SampleEvent(account, now), stored: true})
	s.shards.Send(actors.HashString(account), c)
	if _, err := s.tests.Wait(c); err != nil {
		return "", err
	}
	return id, nil
}

// Recent lists the account's most recent deliveries (at most ListLen, none
// older than Retention as of now), newest first.
func (s *Service) Recent(account string, now time.Time) ([]*storage.Delivery, error) {
	if s.cfg.DB == nil {
		return []*storage.Delivery{}, nil
	}
	return s.cfg.DB.Deliveries(account, now.Add(-Retention), ListLen)
}

// Stop cancels attempts in flight, then stops the shards. Pending events stay
// in the store: the next start resumes them (an interrupted attempt is made
// again).
func (s *Service) Stop() error { return s.StopBy(time.Time{}) }

// StopBy is Stop waiting for the shards only until by (actors.StopWait).
func (s *Service) StopBy(by time.Time) error {
	s.cancel()
	err := s.shards.StopBy(by)
	// The cancelled attempts end at once; one answered 2xx before that
	// deletes its pending record, which must happen before the store closes.
	s.attempts.Wait()
	return err
}

// queued is a new event for an account's queue. stored: queue it only if
// its pending record is stored (a test event, whose sender waits).
type queued struct {
	kind, id string
	ev       *Event
	stored   bool
}

// finished is an attempt's result, sent back to the owning shard.
type finished struct {
	account string
	ev      *event
	url     string
	out     outcome
}

// event is one event in an account's queue.
type event struct {
	kind, id string
	ev       *Event
	body     []byte // Payload, built once: the same bytes on every attempt
	attempts int    // attempts started
	due      time.Time
}

// acct is one account's delivery state. Owned by its shard.
type acct struct {
	ready    []*event // due, waiting for a free slot, oldest first
	waiting  []*event // failed, waiting for their retry time
	inflight int
	// streak counts events in a row that failed every attempt; mailed
	// says the owner was told about the current streak. streakRead says
	// streak and mailed include what the delivery log held when the
	// account was loaded (storedStreak); until then streak counts only
	// the failures since, and the read is tried again at each use.
	streak     int
	mailed     bool
	streakRead bool
	// streakWarned: the failed read was logged (once until it succeeds).
	streakWarned bool
	lastUsed     time.Time
	sinceTrim    int
	dropped      int
}

func (a *acct) pending() int { return len(a.ready) + len(a.waiting) + a.inflight }

// stillRunning is how long after its start an attempt is taken to be still
// running: past its timeout (and the hop back), its result was lost with a
// stopped shard's mailbox, and the stored event is resumed instead.
func (s *Service) stillRunning(f *flight) bool {
	return time.Since(f.started) < s.cfg.Timeout+5*time.Second
}

// resume takes a stored pending event into the shard's state (New, or a
// restart after a panic). An event whose attempt is still running is only
// counted: its result comes back here.
func (sh *shard) resume(p *storage.PendingHook, now time.Time) {
	a := sh.get(p.Account, now)
	if v, ok := sh.svc.flights.Load(p.EventID); ok {
		if sh.svc.stillRunning(v.(*flight)) {
			a.inflight++
			return
		}
		sh.svc.flights.Delete(p.EventID)
	}
	e := eventOf(p)
	a.waiting = append(a.waiting, e) // the next tick starts it when due
}

// shard owns the accounts whose id hashes to it. The state lives in this
// value, which SpawnShards hands back on a restart.
type shard struct {
	svc       *Service
	index     int
	accts     *actors.Table[string, *acct]
	lastPrune time.Time
	// preparing is the event whose attempt is being prepared (with its
	// account), for the restart after a panic there.
	preparing    *event
	preparingFor string
}

func (sh *shard) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *queued:
		_ = sh.enqueue(m, sh.svc.cfg.Clock.Now())
	case *actors.Call[*queued, struct{}]:
		m.Reply(struct{}{}, sh.enqueue(m.Req, sh.svc.cfg.Clock.Now()))
	case *finished:
		sh.finish(m)
	case actors.Tick:
		sh.tick(m.Now)
	case barrier:
		close(m)
	}
}

// barrier is closed by the shard once it handled everything sent to it
// before (tests).
type barrier chan struct{}

// settled waits until no attempt is running and every shard handled what it
// was sent, or until wait passes (tests).
func (s *Service) settled(wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		running := false
		s.flights.Range(func(any, any) bool { running = true; return false })
		if !running {
			break
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < s.shards.Len(); i++ {
		ch := make(barrier)
		s.shards.Send(uint64(i), ch)
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
			return false
		}
	}
	return true
}

func (sh *shard) get(id string, now time.Time) *acct {
	a, ok := sh.accts.Get(id)
	if !ok {
		// A new (or re-loaded) account trims its log on its first write.
		a = &acct{sinceTrim: ListLen - 1}
		sh.accts.Put(id, a)
	}
	if !a.streakRead {
		sh.readStreak(id, a)
	}
	a.lastUsed = now
	return a
}

// readStreak takes the failure streak stored in the account's delivery log
// into a. A read that fails changes nothing and is tried again at the next
// use: taken for 0, a brief store failure while the account loaded reset
// a streak, and the notice went out late or twice. The failures counted
// meanwhile are a lower bound of the streak, as the stored one is.
func (sh *shard) readStreak(id string, a *acct) {
	streak, mailed, err := sh.storedStreak(id)
	if err != nil {
		if !a.streakWarned {
			a.streakWarned = true
			sh.svc.cfg.Logger.Warn("webhook: failure streak not read back; tried again at the account's next delivery", "account", id, "err", err)
		}
		return
	}
	a.streak, a.mailed = max(a.streak, streak), a.mailed || mailed
	a.streakRead, a.streakWarned = true, false
}

// storedStreak reads an account's failure streak back from its delivery
// log, for an account loaded again (a restart, a shard brought back, an
// eviction): the events in a row, newest first, whose last attempt failed,
// up to the newest delivered one. A streak already at FailureStreak was
// mailed when it got there. Without it a restart in a streak sent the
// notice late, or twice.
func (sh *shard) storedStreak(id string) (streak int, mailed bool, err error) {
	db := sh.svc.cfg.DB
	if db == nil {
		return 0, false, nil
	}
	recs, err := db.Deliveries(id, time.Time{}, ListLen)
	if err != nil {
		return 0, false, err
	}
	for _, r := range recs {
		switch {
		case r.Error == "" && r.StatusCode >= 200 && r.StatusCode < 300:
			return streak, streak >= FailureStreak, nil
		case r.Attempt >= MaxAttempts:
			streak++
		}
	}
	return streak, streak >= FailureStreak, nil
}

// enqueue queues m's event for its account. An event that must be stored
// (m.stored) and could not be is dropped, and the store's error returned.
func (sh *shard) enqueue(m *queued, now time.Time) error {
	a := sh.get(m.ev.Account, now)
	if a.pending() >= maxQueued {
		// Counted each; the first since the account loaded is a warning
		// and every one names its event at debug level, so that an
		// operator can tell the customer which alerts never went out
		// without a flood of warnings while a receiver stays down.
		a.dropped++
		sh.svc.dropped.Add(1)
		level := slog.LevelDebug
		if a.dropped == 1 {
			level = slog.LevelWarn
		}
		sh.svc.cfg.Logger.Log(context.Background(), level, "webhook queue full; event dropped", "account", m.ev.Account, "event_id", m.id,
			"queued", a.pending(), "dropped_since_load", a.dropped)
		if m.stored {
			return ErrQueueFull // the operator's test: told, not answered 202
		}
		return nil
	}
	e := &event{kind: m.kind, id: m.id, ev: m.ev, body: Payload(m.kind, m.id, m.ev)}
	if err := sh.keep(m.ev.Account, e, m.stored); err != nil {
		if m.stored {
			sh.svc.cfg.Logger.Warn("webhook test event not queued: it could not be stored", "account", m.ev.Account, "event_id", e.id, "err", err)
			return err
		}
		sh.svc.cfg.Logger.Warn("webhook event not stored; a restart would drop it", "account", m.ev.Account, "event_id", e.id, "err", err)
	}
	a.ready = append(a.ready, e)
	sh.pump(m.ev.Account, a)
	return nil
}

// keep stores e as pending (with its attempts so far and next due time).
// synced waits for the disk: an event whose storing is acknowledged (the
// operator's test, answered 202 once stored) must survive a kill -9 right
// after the answer, not only the next group sync; the others are written
// behind, within the counts' crash bound.
func (sh *shard) keep(id string, e *event, synced bool) error {
	db := sh.svc.cfg.DB
	switch {
	case db == nil:
		return nil
	case synced:
		return db.PutPendingHookSynced(pendingOf(id, e))
	}
	return db.PutPendingHook(pendingOf(id, e))
}

// forget deletes e's pending record: its delivery ended.
func (sh *shard) forget(id string, e *event) {
	if db := sh.svc.cfg.DB; db != nil {
		if err := db.DeletePendingHook(id, e.id); err != nil {
			sh.svc.cfg.Logger.Warn("webhook pending record not deleted; a restart would send it again", "account", id, "event_id", e.id, "err", err)
		}
	}
}

// pump starts attempts while the account has free slots.
func (sh *shard) pump(id string, a *acct) {
	for a.inflight < maxInFlight && len(a.ready) > 0 {
		e := a.ready[0]
		a.ready[0] = nil
		a.ready = a.ready[1:]
		if len(a.ready) == 0 {
			a.ready = nil
		}
		sh.preparing, sh.preparingFor = e, id
		at, ok := sh.prepare(id, e)
		sh.preparing, sh.preparingFor = nil, ""
		if !ok {
			sh.forget(id, e)
			if e.attempts > 0 {
				// Its last attempt is listed as retrying, with a next
				// attempt that now never comes: say how the delivery
				// ended (the admin list's status: failed).
				now := sh.svc.cfg.Clock.Now()
				sh.log(id, a, &storage.Delivery{Account: id, EventID: e.id, Event: e.kind, Attempt: e.attempts,
					EventAt: e.ev.At, At: now, Error: errNotRetried})
			}
			continue
		}
		e.attempts++
		a.inflight++
		sh.svc.flights.Store(e.id, &flight{account: id, ev: e, started: time.Now()})
		sh.svc.attempts.Add(1)
		go func() {
			defer sh.svc.attempts.Done()
			out := sh.svc.post(sh.svc.ctx, at)
			if sh.svc.ctx.Err() != nil {
				// Stopping: the shards are gone or going. A receiver that
				// answered 2xx has the event, so its pending record goes
				// here; left, the next start would send it again.
				if out.ok() {
					sh.forget(id, e)
				}
				return
			}
			sh.svc.shards.Send(actors.HashString(id), &finished{account: id, ev: e, url: at.url, out: out})
		}()
	}
}

// errNotRetried is the logged outcome of a retry that was due when the
// account no longer had a receiver (or its secret could not be read).
const errNotRetried = "not retried: the webhook URL was removed or the signing secret is unreadable"

// prepare reads the account's current URL and secret. An account that no
// longer exists or has no URL drops the event.
func (sh *shard) prepare(id string, e *event) (*attempt, bool) {
	s := sh.svc
	v := s.cfg.Accounts.Get(id)
	if v == nil || v.WebhookURL == "" {
		s.cfg.Logger.Debug("webhook event dropped: no receiver", "account", id, "event_id", e.id)
		return nil, false
	}
	secret, err := s.cfg.Accounts.WebhookSecret(v)
	if err != nil {
		s.cfg.Logger.Error("webhook event dropped: signing secret unreadable", "account", id, "event_id", e.id, "err", err)
		return nil, false
	}
	body := e.body
	if c := chatOf(v.WebhookURL); c != chatNone {
		body = chatBody(c, e.kind, e.id, e.ev)
	}
	return &attempt{url: v.WebhookURL, body: body, secret: secret, eventID: e.id}, true
}

func (sh *shard) finish(m *finished) {
	if _, ok := sh.svc.flights.LoadAndDelete(m.ev.id); !ok {
		return // given up for lost after a restart; the stored event was resumed
	}
	a := sh.get(m.account, m.out.end)
	a.inflight--
	e := m.ev
	rec := &storage.Delivery{Account: m.account, EventID: e.id, Event: e.kind, Attempt: e.attempts, EventAt: e.ev.At,
		At: m.out.start, Duration: m.out.end.Sub(m.out.start), URL: m.url, StatusCode: m.out.status, Error: m.out.err}
	notify := false
	switch {
	case m.out.ok():
		sh.svc.outcomes[0].Add(1)
		sh.forget(m.account, e)
		// A delivery ends any streak: the stored one needs no reading.
		a.streak, a.mailed, a.streakRead = 0, false, true
	case e.attempts < MaxAttempts:
		sh.svc.outcomes[1].Add(1)
		e.due = m.out.end.Add(Backoff[e.attempts-1])
		rec.NextAt = e.due
		if err := sh.keep(m.account, e, false); err != nil {
			sh.svc.cfg.Logger.Warn("webhook event not stored; a restart would drop it", "account", m.account, "event_id", e.id, "err", err)
		}
		a.waiting = append(a.waiting, e)
	default:
		sh.svc.outcomes[2].Add(1)
		sh.forget(m.account, e)
		a.streak++
		// Not before the stored streak is read: it may have been mailed.
		notify = a.streakRead && a.streak >= FailureStreak && !a.mailed
		a.mailed = a.mailed || notify
	}
	sh.log(m.account, a, rec)
	if notify {
		// After the log: the delivery log is written behind, the outbox
		// record synced, and that sync makes this attempt durable too.
		// Mailed first, a crash could keep the notice and lose the
		// attempt, and the restart, reading a streak one short, mailed
		// the same streak again.
		sh.notifyOwner(m.account, m.url, rec)
	}
	sh.pump(m.account, a)
}

// log writes one attempt to the delivery log, trimming the account's records
// to the listed number every ListLen writes.
func (sh *shard) log(id string, a *acct, rec *storage.Delivery) {
	db := sh.svc.cfg.DB
	if db == nil {
		return
	}
	if err := db.PutDelivery(rec); err != nil {
		sh.svc.cfg.Logger.Warn("webhook delivery not logged", "account", id, "err", err)
		return
	}
	if a.sinceTrim++; a.sinceTrim >= ListLen {
		a.sinceTrim = 0
		if err := db.TrimDeliveries(id, ListLen); err != nil {
			sh.svc.cfg.Logger.Warn("webhook delivery log not trimmed", "account", id, "err", err)
		}
	}
}

func (sh *shard) notifyOwner(id, url string, last *storage.Delivery) {
	s := sh.svc
	s.cfg.Logger.Warn("webhook deliveries failing; emailing the owner", "account", id, "streak", FailureStreak)
	if s.cfg.Mail == nil {
		return
	}
	cause := last.Error
	if cause == "" {
		cause = fmt.Sprintf("HTTP %d", last.StatusCode)
	}
	s.cfg.Mail.Send(mailer.Message{Account: id, Kind: "webhook_failures",
		Subject: "Webhook deliveries are failing",
		Body: fmt.Sprintf("The last %d webhook events for your account could not be delivered to %s: each was tried %d times "+
			"(about 1 and 8 minutes apart) without a 2xx answer.\n\nLast attempt: %s at %s (event %s).\n\n"+
			"Check that the endpoint is reachable over HTTPS, answers 2xx within %s and does not redirect. "+
			"You will not be emailed again until a delivery succeeds.\n",
			FailureStreak, mailedURL(url), MaxAttempts, cause, last.At.UTC().Format(time.RFC3339), last.EventID, s.cfg.Timeout)})
}

// mailedURL is the receiver as the failure notice names it: its scheme and
// host, with "/…" for a path. A chat receiver's URL is its own credential
// (Slack's /services/T…/B…/secret, Discord's /api/webhooks/id/token): whoever
// holds it can post to the channel, and the notice travels by SMTP and sits
// in the outbox for 90 days. The host is enough to tell which endpoint
// fails; the account shows the whole URL to its operator.
func mailedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "your webhook endpoint"
	}
	shown := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		shown += "/…"
	}
	return shown
}

// tick starts due retries, forgets idle accounts and, on shard 0, prunes
// expired deliveries.
func (sh *shard) tick(now time.Time) {
	sh.accts.Range(func(id string, a *acct) bool {
		if len(a.waiting) > 0 {
			keep := a.waiting[:0]
			for _, e := range a.waiting {
				if !now.Before(e.due) {
					a.ready = append(a.ready, e)
				} else {
					keep = append(keep, e)
				}
			}
			clear(a.waiting[len(keep):])
			a.waiting = keep
			sh.pump(id, a)
		}
		if a.dropped > 0 {
			sh.svc.cfg.Logger.Warn("webhook events dropped: queue full", "account", id, "dropped", a.dropped)
			a.dropped = 0
		}
		return true
	})
	sh.accts.Sweep(func(_ string, a *acct) bool {
		return a.pending() == 0 && a.streak == 0 && now.Sub(a.lastUsed) > idleAfter
	})
	if sh.index == 0 && sh.svc.cfg.DB != nil && (sh.lastPrune.IsZero() || now.Sub(sh.lastPrune) >= pruneEvery || now.Before(sh.lastPrune)) {
		sh.lastPrune = now
		if err := sh.svc.cfg.DB.PruneDeliveries(now.Add(-Retention)); err != nil {
			sh.svc.cfg.Logger.Warn("webhook deliveries past retention not pruned", "err", err)
		}
	}
}
