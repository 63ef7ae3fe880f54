package devicehist

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// model is a plain reading of the rules over the full log of recorded
// observations, written apart from state.go so that the two check each other.
type model struct {
	log []mEntry
}

type mEntry struct {
	t       int64
	c, d, a string
	ip      netip.Addr // a countable address (account sent, measured, not a shared exit)
	ev      string
	counted bool
}

const (
	mDay    = int64(86400)
	mWindow = 90 * mDay
)

func mWindowStart(now int64) int64 { return (now - mWindow) / mDay } // first UTC day in the window

// epoch is when the (c, d) record last started over: the first visit after
// which its previous visit had left the window. Nothing before it is kept.
func epoch(log []mEntry, c, d string) int64 {
	var start, prev int64 = 0, -1
	for _, e := range log {
		if e.c != c || e.d != d || !e.counted {
			continue
		}
		if prev >= 0 && mWindowStart(e.t) > prev/mDay {
			start = e.t
		}
		prev = e.t
	}
	return start
}

// visits are (c, d)'s counted visits still in the window as of now.
func visits(log []mEntry, c, d string, now int64) []int64 {
	ep := epoch(log, c, d)
	var out []int64
	for _, e := range log {
		if e.c == c && e.d == d && e.counted && e.t >= ep && e.t/mDay >= mWindowStart(now) {
			out = append(out, e.t)
		}
	}
	return out
}

// links are the distinct accounts seen with (c, d) within within of now
// (in the record's epoch; none when the record is empty).
func links(log []mEntry, c, d string, now, within int64) map[string]bool {
	out := map[string]bool{}
	if len(visits(log, c, d, now)) == 0 {
		return out
	}
	ep := epoch(log, c, d)
	for _, e := range log {
		if e.c == c && e.d == d && e.a != "" && e.t >= ep && now-e.t < within {
			out[e.a] = true
		}
	}
	return out
}

func (m *model) facts(q mEntry, ipCounted bool) Facts {
	log := append(m.log[:len(m.log):len(m.log)], q)
	now := q.t
	var f Facts
	if q.d != "" {
		f.Device = true
		f.Repeated = !q.counted
		vs := visits(log, q.c, q.d, now)
		f.History.Visits = len(vs)
		f.History.FirstSeen = time.Unix(slices.Min(vs), 0).UTC()
		f.History.LastSeen = time.Unix(slices.Max(vs), 0).UTC()
		for _, v := range vs {
			if v/3600+24 > now/3600 {
				f.Visits24h++
			}
		}
		f.LinkedAccounts = len(links(log, q.c, q.d, now, mWindow))
		f.History.Accounts = f.LinkedAccounts
	}
	if q.a == "" {
		return f
	}
	f.Account = true
	devs24, devs90, ips90 := map[string]bool{}, map[string]bool{}, map[netip.Addr]bool{}
	seenOther, seenThis := false, false
	for i, e := range log {
		if e.c != q.c || e.a != q.a {
			continue
		}
		if e.d != "" && now-e.t < mDay {
			devs24[e.d] = true
		}
		if e.d != "" && now-e.t < mWindow {
			devs90[e.d] = true
			if i < len(log)-1 && q.d != "" {
				seenOther = seenOther || e.d != q.d
				seenThis = seenThis || e.d == q.d
			}
		}
		if e.ip.IsValid() && now-e.t < mWindow {
			ips90[e.ip] = true
		}
	}
	f.AccountDevices24h = len(devs24)
	f.NewDevice = seenOther && !seenThis
	if q.d != "" {
		f.DeviceAccounts24h = len(links(log, q.c, q.d, now, mDay))
	}
	if ipCounted {
		f.IPCounted = true
		acc := map[string]bool{}
		for _, e := range log {
			if e.c == q.c && e.ip == q.ip && e.a != "" && now-e.t < mDay {
				acc[e.a] = true
			}
		}
		f.IPAccounts24h = len(acc)
	}
	related := map[string]bool{}
	for d := range devs90 {
		for a := range links(log, q.c, d, now, mWindow) {
			related[a] = true
		}
	}
	for _, e := range log {
		if e.c == q.c && e.ip.IsValid() && ips90[e.ip] && e.a != "" && now-e.t < mWindow {
			related[e.a] = true
		}
	}
	delete(related, q.a)
	f.RelatedAccounts90d = len(related)
	return f
}

func (m *model) devices(c string, now int64) []DeviceView {
	var out []DeviceView
	seen := map[string]bool{}
	for _, e := range m.log {
		if e.c != c || e.d == "" || seen[e.d] {
			continue
		}
		seen[e.d] = true
		vs := visits(m.log, c, e.d, now)
		if len(vs) == 0 {
			continue
		}
		out = append(out, DeviceView{VisitorID: e.d, FirstSeen: time.Unix(slices.Min(vs), 0).UTC(), LastSeen: time.Unix(slices.Max(vs), 0).UTC(),
			Visits: len(vs), LinkedAccounts: len(links(m.log, c, e.d, now, mWindow))})
	}
	slices.SortFunc(out, func(a, b DeviceView) int { return b.LastSeen.Compare(a.LastSeen) })
	return out[:min(len(out), DevicesLimit)]
}

// TestModel drives random observations (two customers, a handful of devices,
// accounts and addresses; time steps from seconds to months; repeats, test
// keys, shared exits) through one shard, several shards with sweeps, and a
// store with sweeps, prunes and restarts, and compares every answer with the
// model. The seed is printed on failure.
func TestModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		for _, v := range []struct {
			name     string
			shards   int
			store    bool
			sweep    bool
			restarts bool
		}{
			{"memory-1", 1, false, false, false},
			{"memory-4-sweeps", 4, false, true, false},
			{"store-4-restarts", 4, true, true, true},
		} {
			t.Run(fmt.Sprintf("%s/seed=%d", v.name, seed), func(t *testing.T) {
				runModel(t, seed, v.shards, v.store, v.sweep, v.restarts)
			})
		}
	}
}

func runModel(t *testing.T, seed uint64, shards int, withStore, sweep, restarts bool) {
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := vfs.NewMem()
	var db *storage.DB
	start := func() *Client {
		cfg := Config{Shards: shards}
		if withStore {
			db = openDB(t, fs)
			cfg.Store = db
			cfg.IdleAfter = time.Hour
			cfg.Shards = 1 + rng.IntN(4)
		}
		return newClient(t, cfg)
	}
	c := start()
	stop := func() {
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
		if db != nil {
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer func() { stop() }()

	m := &model{}
	customers := []string{"acc_a", "acc_b"}
	ips := []netip.Addr{netip.MustParseAddr("73.0.0.1"), netip.MustParseAddr("73.0.0.2"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")}
	type last struct {
		ev string
		t  int64
	}
	lastEv := map[[2]string]last{}
	now := t0.Unix()
	evs := 0
	// How often the interesting cases came up: each must, or the run proves little.
	var stats [6]int
	defer func() {
		if slices.Contains(stats[:], 0) && !t.Failed() {
			t.Errorf("seed %d: a case never came up (repeats, new devices, related, ip, device accounts, returning): %v", seed, stats)
		}
	}()
	for step := 0; step < 1500; step++ {
		switch r := rng.IntN(100); {
		case r < 70:
			now += 1 + rng.Int64N(600)
		case r < 90:
			now += 3600 + rng.Int64N(5*3600)
		case r < 98:
			now += mDay + rng.Int64N(9*mDay)
		default:
			now += 30*mDay + rng.Int64N(70*mDay)
		}
		o := Observation{Customer: customers[rng.IntN(2)], Test: rng.IntN(10) == 0, Now: time.Unix(now, 0).UTC()}
		q := mEntry{t: now, c: o.Customer, counted: true}
		if rng.IntN(10) < 8 {
			q.d = fmt.Sprintf("dev%d", rng.IntN(5))
		}
		if rng.IntN(10) < 7 || q.d == "" {
			q.a = fmt.Sprintf("user%d", rng.IntN(5))
		}
		if q.d != "" {
			l, ok := lastEv[[2]string{q.c, q.d}]
			switch r := rng.IntN(100); {
			case r < 15 && ok && now-l.t < 3600:
				q.ev, q.counted = l.ev, false
			case r < 25:
				// no event id: cannot be deduplicated
			default:
				evs++
				q.ev = fmt.Sprintf("ev%d", evs)
			}
		}
		if rng.IntN(100) >= 15 {
			o.IP = ips[rng.IntN(len(ips))]
		}
		o.SharedExit = rng.IntN(100) < 15
		ipCounted := q.a != "" && o.IP.IsValid() && !o.SharedExit
		if ipCounted {
			q.ip = o.IP
		}
		o.EventID, o.DeviceID, o.AccountID = q.ev, q.d, q.a

		want := m.facts(q, ipCounted)
		got, err := c.Observe(o)
		if err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
		if got != want {
			t.Fatalf("seed %d step %d: %+v\n got %+v\nwant %+v", seed, step, o, got, want)
		}
		stats[0] += b2i(got.Repeated)
		stats[1] += b2i(got.NewDevice)
		stats[2] += b2i(got.RelatedAccounts90d > 0)
		stats[3] += b2i(got.IPCounted && got.IPAccounts24h > 1)
		stats[4] += b2i(got.DeviceAccounts24h > 1)
		stats[5] += b2i(got.History.Visits > 5)
		if !o.Test {
			m.log = append(m.log, q)
			if q.d != "" && q.counted && q.ev != "" {
				lastEv[[2]string{q.c, q.d}] = last{q.ev, now}
			}
		}

		if sweep && rng.IntN(50) == 0 {
			c.Sweep(time.Unix(now, 0))
		}
		if withStore && rng.IntN(100) == 0 {
			if err := c.Prune(time.Unix(now, 0)); err != nil {
				t.Fatal(err)
			}
		}
		if restarts && rng.IntN(200) == 0 {
			stop()
			c = start()
		}
		if rng.IntN(100) == 0 || step == 1499 {
			for _, cust := range customers {
				got, err := c.Devices(cust, 0, time.Unix(now, 0))
				if err != nil {
					t.Fatal(err)
				}
				if want := m.devices(cust, now); !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d devices of %s:\n got %+v\nwant %+v", seed, step, cust, got, want)
				}
			}
		}
	}
	if withStore {
		// Once everything is past the window, pruning leaves no key behind:
		// the index bookkeeping never lost a record or an entry.
		end := time.Unix(now, 0).Add(200 * 24 * time.Hour)
		if err := c.Prune(end); err != nil {
			t.Fatal(err)
		}
		if r, e, n, err := db.HistKeys(); err != nil || r+e+n != 0 {
			t.Fatalf("seed %d: %d records, %d expiry, %d recent keys left after everything expired (%v)", seed, r, e, n, err)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
