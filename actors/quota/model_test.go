package quota

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// model is a plain-map reading of the quota rules, written apart from
// account.charge so that the two check each other.
type model struct {
	win map[string]*[2]struct {
		start time.Time
		n     int64
	}
	hwarn map[string]*[2]time.Time
	// hstored are the hourly warning times the store keeps: the latest of
	// each sent, which a restart reloads.
	hstored map[string]*[2]time.Time
	months  map[string]map[storage.Month]*storage.MonthCounts
	tot     map[string]*storage.Totals
	warns   []Warning
}

func newModel() *model {
	return &model{
		win: map[string]*[2]struct {
			start time.Time
			n     int64
		}{},
		hwarn:   map[string]*[2]time.Time{},
		hstored: map[string]*[2]time.Time{},
		months:  map[string]map[storage.Month]*storage.MonthCounts{},
		tot:     map[string]*storage.Totals{},
	}
}

// restart forgets what lives in memory only; the hourly warning times are
// the store's again.
func (m *model) restart() {
	m.win = map[string]*[2]struct {
		start time.Time
		n     int64
	}{}
	m.hwarn = map[string]*[2]time.Time{}
	for acct, st := range m.hstored {
		hw := *st
		m.hwarn[acct] = &hw
	}
}

func (m *model) state(acct string, now time.Time) (*[2]struct {
	start time.Time
	n     int64
}, *storage.MonthCounts, *storage.Totals) {
	if m.win[acct] == nil {
		m.win[acct] = &[2]struct {
			start time.Time
			n     int64
		}{}
	}
	if m.hwarn[acct] == nil {
		m.hwarn[acct] = &[2]time.Time{}
		m.hstored[acct] = &[2]time.Time{}
	}
	if m.months[acct] == nil {
		m.months[acct] = map[storage.Month]*storage.MonthCounts{}
	}
	mo := storage.MonthOf(now)
	if m.months[acct][mo] == nil {
		m.months[acct][mo] = &storage.MonthCounts{}
	}
	if m.tot[acct] == nil {
		m.tot[acct] = &storage.Totals{}
	}
	return m.win[acct], m.months[acct][mo], m.tot[acct]
}

// expire empties a window that has run out (or lies more than Stagger in the
// future after the test clock went back) when it is used.
func expire(w *struct {
	start time.Time
	n     int64
}, now time.Time) {
	if w.n > 0 && (now.Sub(w.start) >= time.Hour || now.Before(w.start.Add(-Stagger))) {
		w.n = 0
	}
}

func nextMonth(now time.Time) time.Time {
	y, mo, _ := now.Date()
	return time.Date(y, mo+1, 1, 0, 0, 0, 0, time.UTC)
}

func ceilSec(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	if s < 1 {
		s = 1
	}
	return s
}

func (m *model) charge(c Charge) ChargeResult {
	w, mc, tot := m.state(c.Account, c.Now)
	bw := &w[c.Bucket]
	expire(bw, c.Now)
	lim := c.Limits.Monthly
	used := &mc.Used
	base := WarnMonthly80
	if c.Kind == Lookup {
		lim, used, base = c.Limits.MonthlyLookups, &mc.Lookups, WarnLookups80
	}
	var r ChargeResult
	if c.Monthly && lim >= 0 && *used >= lim {
		r.Refusal, r.RetryAfter = RefusedMonthly, ceilSec(nextMonth(c.Now).Sub(c.Now))
	} else if c.Hourly && c.Limits.Hourly >= 0 && bw.n >= c.Limits.Hourly {
		r.Refusal, r.RetryAfter = RefusedHourly, ceilSec(bw.start.Add(time.Hour).Sub(c.Now))
	}
	if r.Refusal == NotRefused {
		r.Allowed = true
		if c.Hourly {
			if bw.n == 0 {
				bw.start = c.Now
			}
			bw.n++
			if h := c.Limits.Hourly; c.Bucket == Live && h >= 0 {
				hw := m.hwarn[c.Account]
				for i, th := range []int64{max((h*8+9)/10, 1), h} {
					if bw.n >= th && (hw[i].IsZero() || c.Now.Sub(hw[i]) >= 24*time.Hour || c.Now.Before(hw[i])) {
						hw[i] = c.Now
						if st := m.hstored[c.Account]; c.Now.After(st[i]) {
							st[i] = c.Now
						}
						m.warns = append(m.warns, Warning{c.Account, WarnHourly80 + WarnKind(i), Live, h, bw.n, c.Now})
					}
				}
			}
		}
		if c.Monthly {
			*used++
			if lim >= 0 {
				for i, th := range []int64{max((lim*8+9)/10, 1), lim} {
					bit := uint8(1) << (base - WarnMonthly80 + WarnKind(i))
					if *used >= th && mc.Warned&bit == 0 {
						mc.Warned |= bit
						m.warns = append(m.warns, Warning{c.Account, base + WarnKind(i), c.Bucket, lim, *used, c.Now})
					}
				}
			}
		}
		if c.Total {
			tot.Evaluations++
		}
	} else {
		tot.LimitHits++
	}
	switch {
	case c.Limits.Hourly >= 0:
		r.Capped, r.Limit, r.Remaining = true, c.Limits.Hourly, max(c.Limits.Hourly-bw.n, 0)
		end := c.Now.Add(time.Hour)
		if bw.n > 0 {
			end = bw.start.Add(time.Hour)
		}
		r.Reset = end.Add(time.Second - 1).Unix()
	case lim >= 0:
		r.Capped, r.Limit, r.Remaining, r.Reset = true, lim, max(lim-*used, 0), nextMonth(c.Now).Unix()
	}
	return r
}

func ptr[T any](v T) *T { return &v }

func (m *model) usage(u Usage) UsageView {
	w, mc, tot := m.state(u.Account, u.Now)
	bw := &w[u.Bucket]
	expire(bw, u.Now)
	v := UsageView{KeyType: map[Bucket]string{Live: "live", Test: "test"}[u.Bucket], UsedThisHour: bw.n,
		Uncapped: u.Limits.Hourly < 0 && u.Limits.Monthly < 0, TotalEvaluations: tot.Evaluations, LimitHits: tot.LimitHits,
		Plan: u.Limits.Plan, MonthUsed: mc.Used, MonthLookupsUsed: mc.Lookups, MonthResetsAt: nextMonth(u.Now)}
	if u.Limits.Hourly >= 0 {
		v.HourlyLimit, v.Remaining = ptr(u.Limits.Hourly), ptr(max(u.Limits.Hourly-bw.n, 0))
	}
	if bw.n > 0 {
		v.ResetsAt = ptr(bw.start.Add(time.Hour))
	}
	if u.Limits.Monthly >= 0 {
		v.MonthlyLimit = ptr(u.Limits.Monthly)
	}
	if u.Limits.MonthlyLookups >= 0 {
		v.MonthlyLookupLimit = ptr(u.Limits.MonthlyLookups)
	}
	if !u.Limits.Grandfathered.IsZero() {
		v.GrandfatheredUntil = ptr(u.Limits.Grandfathered)
	}
	return v
}

type recorder struct {
	mu sync.Mutex
	ws []Warning
}

func (r *recorder) Warn(w Warning) {
	r.mu.Lock()
	r.ws = append(r.ws, w)
	r.mu.Unlock()
}

func (r *recorder) get() []Warning {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Warning(nil), r.ws...)
}

// harness runs a Client over a MemFS-backed store that survives restarts.
type harness struct {
	t      testing.TB
	sys    *actor.ActorSystem
	fs     vfs.FS
	db     *storage.DB
	c      *Client
	shards int
	rec    *recorder
	memory bool
}

func newHarness(t testing.TB, shards int, memory bool) *harness {
	h := &harness{t: t, sys: quietSystem(), fs: vfs.NewMem(), shards: shards, rec: &recorder{}, memory: memory}
	h.start()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) start() {
	cfg := Config{Shards: h.shards, Notifier: h.rec}
	if !h.memory {
		db, err := storage.Open("q", storage.Options{FS: h.fs})
		if err != nil {
			h.t.Fatal(err)
		}
		h.db, cfg.Store = db, db
	}
	h.c = New(h.sys.Root, cfg)
}

func (h *harness) stop() {
	if h.c == nil {
		return
	}
	if err := h.c.Stop(); err != nil {
		h.t.Error(err)
	}
	if h.db != nil {
		if err := h.db.Close(); err != nil {
			h.t.Error(err)
		}
	}
	h.c, h.db = nil, nil
}

func (h *harness) restart() { h.stop(); h.start() }

// quietSystem is an actor system that does not log.
func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
}

type profile struct {
	plan    string
	h, m    *int64
	created time.Time
}

var profiles = map[string]profile{
	"a":                      {PlanCustom, ptr[int64](4), ptr[int64](10), t0},
	"b":                      {PlanCustom, nil, ptr[int64](6), t0},
	"c":                      {PlanCustom, ptr[int64](3), nil, t0},
	"d":                      {PlanPublicInterest, nil, nil, t0},
	"e":                      {PlanFree, nil, nil, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)},
	"f":                      {PlanCustom, ptr[int64](2), ptr[int64](3), t0},
	"acc_with_a_longer_id/ü": {PlanCustom, ptr[int64](1), ptr[int64](1), t0},
}

var profileNames = []string{"a", "b", "c", "d", "e", "f", "acc_with_a_longer_id/ü"}

func TestQuotaMetamorphic(t *testing.T) {
	seeds := 6
	ops := 1500
	if testing.Short() {
		seeds, ops = 3, 500
	}
	for s := 0; s < seeds; s++ {
		seed := uint64(time.Now().UnixNano()) + uint64(s)
		for _, v := range []struct {
			name     string
			shards   int
			memory   bool
			restarts bool
		}{
			{"1-shard", 1, false, false},
			{"8-shards", 8, false, false},
			{"8-shards-restarts", 8, false, true},
			{"4-shards-memory", 4, true, false},
		} {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, v.name), func(t *testing.T) {
				runMetamorphic(t, seed, ops, v.shards, v.memory, v.restarts)
			})
		}
	}
}

func runMetamorphic(t *testing.T, seed uint64, ops, shards int, memory, restarts bool) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := newHarness(t, shards, memory)
	m := newModel()
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	var swept time.Time // when the last sweep ran
	reached := storage.MonthOf(now)
	fail := func(op int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d op %d (%v): %s", seed, op, now, fmt.Sprintf(format, args...))
	}
	for op := 0; op < ops; op++ {
		switch x := rng.IntN(100); {
		case x < 25:
		case x < 55:
			now = now.Add(time.Duration(rng.IntN(120)) * time.Second)
		case x < 75:
			now = now.Add(time.Duration(rng.IntN(40)) * time.Minute)
		case x < 95:
			now = now.Add(time.Duration(50+rng.IntN(30)) * time.Minute)
		default:
			now = now.Add(time.Duration(1+rng.IntN(40)) * 24 * time.Hour)
		}
		if rng.IntN(200) == 0 {
			// The test clock may go back, but not before the last sweep: a
			// sweep evicts idle accounts, and with them hourly windows that
			// had ended by then, which the model does not track (windows
			// are in memory only, SPEC §8).
			now = now.Add(-time.Duration(rng.IntN(90)) * time.Minute)
			if now.Before(swept) {
				now = swept
			}
			// Without a store the actors keep the current month only: a
			// month change forgets the last one, which only the store could
			// give back. So without one the clock does not go back into an
			// earlier month than it reached.
			if memory && now.Before(reached.Start()) {
				now = reached.Start()
			}
		}
		if m := storage.MonthOf(now); m > reached {
			reached = m
		}
		acct := profileNames[rng.IntN(len(profileNames))]
		p := profiles[acct]
		lim := LimitsFor(p.plan, p.h, p.m, p.created, now)
		b := Bucket(rng.IntN(2))
		switch x := rng.IntN(100); {
		case x < 80:
			c := Charge{Account: acct, Bucket: b, Kind: Kind(rng.IntN(2)), Limits: lim,
				Hourly: rng.IntN(10) < 9, Monthly: rng.IntN(10) < 7, Total: rng.IntN(2) == 0, Now: now}
			got, err := h.c.Charge(c)
			if err != nil {
				fail(op, "charge: %v", err)
			}
			if want := m.charge(c); got != want {
				fail(op, "charge %+v:\n got %+v\nwant %+v", c, got, want)
			}
		case x < 92:
			u := Usage{Account: acct, Bucket: b, Limits: lim, Now: now}
			got, err := h.c.Usage(u)
			if err != nil {
				fail(op, "usage: %v", err)
			}
			if want := m.usage(u); !reflect.DeepEqual(got, want) {
				fail(op, "usage %s %v:\n got %s\nwant %s", acct, b, show(got), show(want))
			}
		case x < 97:
			h.c.Sweep(now)
			swept = now
		default:
			if restarts {
				h.restart()
				m.restart()
			}
		}
		if got := h.rec.get(); !reflect.DeepEqual(got, m.warns) {
			fail(op, "warnings:\n got %+v\nwant %+v", got, m.warns)
		}
	}
}

func show(v UsageView) string {
	s := fmt.Sprintf("%+v", v)
	for _, p := range []*int64{v.HourlyLimit, v.Remaining, v.MonthlyLimit, v.MonthlyLookupLimit} {
		if p != nil {
			s += fmt.Sprintf(" %d", *p)
		} else {
			s += " nil"
		}
	}
	if v.ResetsAt != nil {
		s += " resets " + v.ResetsAt.String()
	}
	return s
}
