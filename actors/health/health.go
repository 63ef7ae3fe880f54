// Package health probes the service's own parts on a tick (storage write and
// read, the account directory, the feeds) and keeps 90 days of daily
// results, for the status endpoint's per-service uptime and history. One
// actor owns the days; the probe result of each tick is written to storage so
// the history survives restarts.
package health

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// Days is the history window.
const Days = 90

// Checks are the probes; each reports whether its part works.
type Checks struct {
	Storage func() error // write and read back with sync
	Feeds   func() bool  // a snapshot with coverage is loaded
	// Actors names the actor shard sets with a shard down (stopped by its
	// supervisor, not yet restarted): the API cannot fully answer meanwhile.
	// actors.Supervision.Down fits.
	Actors func() []string
}

// Config configures New.
type Config struct {
	DB       *storage.DB // nil: memory only
	Clock    clock.Clock
	Interval time.Duration // 0 = 10 s
	Checks   Checks
	Logger   *slog.Logger
}

// Service is one part's health.
type Service struct {
	OK        bool
	UptimePct float64 // over the window; 100 before any probe
}

// Day is one entry of history_90d. Nil percentages mean no probe that day.
type Day struct {
	Day                                time.Time
	Samples                            uint64
	Pct, APIPct, DashboardPct, AuthPct *float64
}

// Report is what the status endpoint shows.
type Report struct {
	LastProbe                 time.Time
	API, Storage, Auth, Feeds Service
	History                   []Day // oldest first, one per day of the window, today last
}

// Monitor is the typed client of the health actor.
type Monitor struct {
	shards  *actors.Shards
	reports *actors.Calls[time.Time, Report]
	down    func() []string
}

type state struct {
	cfg    Config
	days   map[int64]*storage.HealthDay // Unix day → counts
	last   time.Time
	lastOK [4]bool
	// dirty are the days counted since they were last stored: a day whose
	// last probes found the store down is stored with the next day's first
	// good probe, so an outage across midnight is not lost on restart.
	dirty map[int64]bool
}

type owner struct{ st *state }

type probeNow struct{ done chan struct{} }

// New loads the stored history, probes once and starts the tick.
func New(root *actor.RootContext, cfg Config) (*Monitor, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	st := &state{cfg: cfg}
	// A history the build cannot read (a record a newer build wrote, a
	// corrupt one) stops the start, as the traffic counts' does: started
	// empty, the status would hide the past days and the start probe would
	// write today's record from zero over the stored one.
	if err := st.load(); err != nil {
		return nil, err
	}
	m := &Monitor{reports: actors.NewCalls[time.Time, Report](0), down: cfg.Checks.Actors}
	// A restart after a panic reads the history from the store again.
	m.shards = actors.SpawnShards(root, 1, func(int) actor.Actor { return owner{st} },
		actors.Named("health"), actors.WithLogger(cfg.Logger), actors.OnRestart(func(int) {
			if err := st.load(); err != nil {
				cfg.Logger.Warn("health: history not reloaded after a restart; starting empty", "err", err)
			}
		}))
	done := make(chan struct{})
	m.shards.Send(0, &probeNow{done: done})
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		m.shards.Stop()
		return nil, fmt.Errorf("health: first probe did not finish in 30 s")
	}
	m.shards.Tick(cfg.Clock, cfg.Interval)
	return m, nil
}

// load reads the stored history (memory only without a store); on an error
// the history is empty.
func (st *state) load() error {
	st.days = map[int64]*storage.HealthDay{}
	st.last, st.lastOK = time.Time{}, [4]bool{}
	if st.cfg.DB == nil {
		return nil
	}
	hs, err := st.cfg.DB.Health(dayOf(st.cfg.Clock.Now()).AddDate(0, 0, -Days))
	if err != nil {
		return fmt.Errorf("load the status history: %w", err)
	}
	for i := range hs {
		h := hs[i]
		st.days[h.Day.Unix()/86400] = &h
	}
	return nil
}

// Down names the actor shard sets with a shard down right now. It asks no
// actor, so it answers even while the health actor itself is down.
func (m *Monitor) Down() []string {
	if m.down == nil {
		return nil
	}
	return m.down()
}

// Report returns the health as of now.
func (m *Monitor) Report(now time.Time) (Report, error) {
	c := m.reports.Get(now)
	m.shards.Send(0, c)
	return m.reports.Wait(c)
}

// Stop stops the actor.
func (m *Monitor) Stop() error { return m.shards.Stop() }

// StopBy is Stop waiting for the shard only until by (actors.StopWait).
func (m *Monitor) StopBy(by time.Time) error { return m.shards.StopBy(by) }

func dayOf(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }

func (o owner) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case actors.Tick:
		o.st.probe(m.Now)
	case *probeNow:
		o.st.probe(o.st.cfg.Clock.Now())
		close(m.done)
	case *actors.Call[time.Time, Report]:
		m.Reply(o.st.report(m.Req), nil)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// probe runs the checks and counts the result into today.
func (st *state) probe(now time.Time) {
	storageOK := st.cfg.Checks.Storage == nil || st.cfg.Checks.Storage() == nil
	feedsOK := st.cfg.Checks.Feeds == nil || st.cfg.Checks.Feeds()
	// The API answers from this process, so it is up whenever a probe runs
	// and every actor shard runs; authentication reads the key directory in
	// memory but needs the store for the quota and account writes behind
	// every authenticated call.
	apiOK := st.cfg.Checks.Actors == nil || len(st.cfg.Checks.Actors()) == 0
	authOK := storageOK
	st.last = now
	st.lastOK = [4]bool{apiOK, storageOK, authOK, feedsOK}
	k := now.Unix() / 86400
	d := st.days[k]
	if d == nil {
		d = &storage.HealthDay{Day: dayOf(now)}
		st.days[k] = d
	}
	d.Samples++
	d.APIOK += b2u(apiOK)
	d.StorageOK += b2u(storageOK)
	d.AuthOK += b2u(authOK)
	d.FeedsOK += b2u(feedsOK)
	d.AllOK += b2u(apiOK && storageOK && authOK)
	if st.dirty == nil {
		st.dirty = map[int64]bool{}
	}
	st.dirty[k] = true
	cut := dayOf(now).AddDate(0, 0, -Days)
	for dk := range st.days {
		if dk < cut.Unix()/86400 {
			delete(st.days, dk)
			delete(st.dirty, dk)
		}
	}
	if st.cfg.DB != nil && storageOK {
		days := make([]*storage.HealthDay, 0, len(st.dirty))
		for dk := range st.dirty {
			if x := st.days[dk]; x != nil {
				days = append(days, x)
			}
		}
		if err := st.cfg.DB.PutHealth(cut, days...); err != nil {
			st.cfg.Logger.Warn("status history not stored (nor days past retention pruned)", "err", err)
		} else {
			clear(st.dirty)
		}
	}
}

func pct(ok, n uint64) *float64 {
	if n == 0 {
		return nil
	}
	p := float64(int64(float64(ok)*10000/float64(n)+0.5)) / 100 // two decimals
	return &p
}

// report builds the window ending today.
func (st *state) report(now time.Time) Report {
	r := Report{LastProbe: st.last}
	var n, api, sto, auth, feeds uint64
	today := dayOf(now)
	for i := Days - 1; i >= 0; i-- {
		day := today.AddDate(0, 0, -i)
		e := Day{Day: day}
		if d := st.days[day.Unix()/86400]; d != nil {
			e.Samples = d.Samples
			// The day's pct is the share of probes that found the service
			// up: API, storage and authentication healthy together.
			e.Pct, e.APIPct, e.AuthPct = pct(d.AllOK, d.Samples), pct(d.APIOK, d.Samples), pct(d.AuthOK, d.Samples)
			// The dashboard is the admin API, served by this same process.
			e.DashboardPct = e.APIPct
			n, api, sto, auth, feeds = n+d.Samples, api+d.APIOK, sto+d.StorageOK, auth+d.AuthOK, feeds+d.FeedsOK
		}
		r.History = append(r.History, e)
	}
	up := func(ok bool, good uint64) Service {
		s := Service{OK: ok, UptimePct: 100}
		if p := pct(good, n); p != nil {
			s.UptimePct = *p
		}
		return s
	}
	r.API, r.Storage, r.Auth, r.Feeds = up(st.lastOK[0], api), up(st.lastOK[1], sto), up(st.lastOK[2], auth), up(st.lastOK[3], feeds)
	return r
}
