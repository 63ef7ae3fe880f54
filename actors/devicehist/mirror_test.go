package devicehist

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// feed wires an owner's sink to a channel the test drains into a holder
// before each holder call, so delivery is immediate and ordered.
type feed struct {
	ch chan MirrorPush
}

func newFeed(owner *Client) *feed {
	f := &feed{ch: make(chan MirrorPush, 1<<16)}
	owner.SetMirrorSink(func(p MirrorPush) {
		select {
		case f.ch <- p:
		default:
			panic("mirror feed full")
		}
	})
	return f
}

// drain hands every push so far to apply and returns them.
func (f *feed) drain(apply func(MirrorPush)) []MirrorPush {
	var out []MirrorPush
	for {
		select {
		case p := <-f.ch:
			out = append(out, p)
			if apply != nil {
				apply(p)
			}
		default:
			return out
		}
	}
}

func keysOf(o Observation) MirrorKeys {
	return MirrorKeys{DeviceID: o.DeviceID, AccountID: o.AccountID, IP: o.IP, SharedExit: o.SharedExit}
}

// TestMirrorModel: an observation answered over a holder's mirror gets
// exactly the facts the owner answers for it (the owner records it right
// after), through watches, re-seeding, the holder's idle sweeps and the
// owner's sweeps and prunes, with the owner's existence filters and
// without them; with them, brand-new devices, accounts and addresses miss
// less (the same run, step for step).
func TestMirrorModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		for _, withStore := range []bool{false, true} {
			t.Run(fmt.Sprintf("store=%v/seed=%d", withStore, seed), func(t *testing.T) {
				without := runMirrorModel(t, seed, withStore, false)
				with := runMirrorModel(t, seed, withStore, true)
				t.Logf("not mirrored: %d without filters, %d with", without, with)
				if with >= without {
					t.Fatalf("filters did not spare a miss: %d with, %d without", with, without)
				}
			})
		}
	}
}

// runMirrorModel runs the model and returns how many holder answers
// missed; without filters the holder never sees one.
func runMirrorModel(t *testing.T, seed uint64, withStore, filters bool) int {
	rng := rand.New(rand.NewPCG(seed, 11))
	cfg := Config{Shards: 4}
	if withStore {
		db := openDB(t, vfs.NewMem())
		t.Cleanup(func() { _ = db.Close() })
		cfg.Store, cfg.IdleAfter = db, time.Hour
	}
	owner := newClient(t, cfg)
	holder := newClient(t, Config{Shards: 2, IdleAfter: 6 * time.Hour})
	fd := newFeed(owner)
	apply := holder.MirrorApply
	if !filters {
		apply = func(p MirrorPush) {
			if len(p.Filter) == 0 {
				holder.MirrorApply(p)
			}
		}
	}
	const watcher = 7
	customers := []string{"acc_a", "acc_b"}
	ips := []netip.Addr{netip.MustParseAddr("73.0.0.1"), netip.MustParseAddr("73.0.0.2"), netip.MustParseAddr("2001:db8::1")}
	now := t0.Unix()
	var lastEv string
	var compared, unknown, related, repeated int
	used := map[string]int64{}
	for step := range 600 {
		switch r := rng.IntN(100); {
		case r < 70:
			now += 1 + rng.Int64N(600)
		case r < 92:
			now += 3600 + rng.Int64N(5*3600)
		case r < 99:
			now += mDay + rng.Int64N(9*mDay)
		default:
			now += 40*mDay + rng.Int64N(60*mDay)
		}
		o := Observation{Customer: customers[rng.IntN(len(customers))], Test: rng.IntN(10) == 0, Now: time.Unix(now, 0).UTC()}
		if rng.IntN(10) < 8 {
			o.DeviceID = fmt.Sprintf("dev%d", rng.IntN(4))
			if rng.IntN(8) == 0 { // brand new
				o.DeviceID = fmt.Sprintf("newdev%d", step)
			}
		}
		if rng.IntN(10) < 7 || o.DeviceID == "" {
			o.AccountID = fmt.Sprintf("user%d", rng.IntN(4))
			if rng.IntN(8) == 0 {
				o.AccountID = fmt.Sprintf("newuser%d", step)
			}
		}
		switch r := rng.IntN(100); {
		case r < 15 && lastEv != "":
			o.EventID = lastEv
		case r < 25:
		default:
			o.EventID = fmt.Sprintf("ev%d", step)
			lastEv = o.EventID
		}
		if rng.IntN(100) >= 15 {
			o.IP = ips[rng.IntN(len(ips))]
			if rng.IntN(8) == 0 {
				o.IP = netip.AddrFrom4([4]byte{74, 0, byte(step >> 8), byte(step)})
			}
		}
		o.SharedExit = rng.IntN(100) < 15

		fd.drain(apply)
		// As the cluster does (cluster/rpc's mirror janitor), a
		// customer's mirror unused for a while is dropped and unwatched:
		// its next watch is a first one again.
		if now-used[o.Customer] > 6*3600 {
			holder.MirrorDrop(o.Customer)
			owner.Unwatch(o.Customer, watcher)
		}
		used[o.Customer] = now
		if rng.IntN(100) < 25 {
			if _, err := owner.Observe(o); err != nil {
				t.Fatal(err)
			}
		} else {
			mf, merr := holder.MirrorObserve(o)
			if errors.Is(merr, ErrNotMirrored) {
				unknown++
				if err := owner.Watch(o.Customer, watcher, keysOf(o)); err != nil {
					t.Fatal(err)
				}
				waitFilters(t, owner, o.Customer)
			} else if merr != nil {
				t.Fatalf("step %d: %v", step, merr)
			}
			of, err := owner.Observe(o)
			if err != nil {
				t.Fatal(err)
			}
			if merr == nil {
				compared++
				if mf != of {
					t.Fatalf("seed %d step %d: %+v\nmirror %+v\n owner %+v", seed, step, o, mf, of)
				}
				related += b2i(of.RelatedAccounts90d > 0)
				repeated += b2i(of.Repeated)
			}
		}
		if rng.IntN(40) == 0 {
			owner.Sweep(time.Unix(now, 0))
		}
		if rng.IntN(20) == 0 {
			holder.Sweep(time.Unix(now, 0))
		}
		if withStore && rng.IntN(60) == 0 {
			if err := owner.Prune(time.Unix(now, 0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if compared < 100 || unknown == 0 || related == 0 || repeated == 0 {
		t.Fatalf("the run proves little: %d compared, %d unknown, %d related, %d repeated", compared, unknown, related, repeated)
	}
	t.Logf("filters=%v: %d compared, %d not mirrored, %d related, %d repeated", filters, compared, unknown, related, repeated)
	return unknown
}

// seed watches the customer for the holder and applies the snapshot.
func seedMirror(t *testing.T, owner, holder *Client, fd *feed, watcher uint64, o Observation) {
	t.Helper()
	if err := owner.Watch(o.Customer, watcher, keysOf(o)); err != nil {
		t.Fatal(err)
	}
	// The snapshot is pushed before the shard answers what was sent after
	// it, and a first watch's filter (built off the shard with a store)
	// once the build is handed back.
	waitFilters(t, owner, o.Customer)
	fd.drain(holder.MirrorApply)
}

// TestTakeResetsWatchers: a take tells the watchers Reset and stops their
// feed; the holder's mirror of the customer is gone after it.
func TestTakeResetsWatchers(t *testing.T) {
	for _, withStore := range []bool{false, true} {
		t.Run(fmt.Sprintf("store=%v", withStore), func(t *testing.T) {
			cfg := Config{Shards: 2}
			if withStore {
				db := openDB(t, vfs.NewMem())
				t.Cleanup(func() { _ = db.Close() })
				cfg.Store = db
			}
			owner := newClient(t, cfg)
			holder := newClient(t, Config{Shards: 2})
			fd := newFeed(owner)
			o := Observation{Customer: "acc_1", EventID: "e1", DeviceID: "dev", AccountID: "u", IP: ip1, Now: t0}
			observe(t, owner, o)
			seedMirror(t, owner, holder, fd, 1, o)
			o.EventID, o.Now = "e2", t0.Add(time.Minute)
			if _, err := holder.MirrorObserve(o); err != nil {
				t.Fatalf("mirror before take: %v", err)
			}
			if _, err := owner.Take(func(c string) bool { return c == "acc_1" }, t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			ps := fd.drain(holder.MirrorApply)
			if len(ps) != 1 || !ps[0].Reset || ps[0].Watcher != 1 || ps[0].Customer != "acc_1" {
				t.Fatalf("pushes after take: %+v", ps)
			}
			if _, err := holder.MirrorObserve(o); !errors.Is(err, ErrNotMirrored) {
				t.Fatalf("mirror after reset: %v", err)
			}
			observe(t, owner, o)
			if ps := fd.drain(nil); len(ps) != 0 {
				t.Fatalf("the feed went on after take: %+v", ps)
			}
		})
	}
}

// TestPrunePushesTrimmedAndDeleted: an expiry pushes the trimmed records
// present and the deleted ones absent (TestPruneRemovesExpired's setup).
func TestPrunePushesTrimmedAndDeleted(t *testing.T) {
	db := openDB(t, vfs.NewMem())
	defer db.Close()
	owner := newClient(t, Config{Shards: 2, Store: db})
	holder := newClient(t, Config{Shards: 2})
	fd := newFeed(owner)
	observe(t, owner, Observation{Customer: "acc_1", EventID: "e1", DeviceID: "old", AccountID: "gone", IP: ip2, Now: t0})
	observe(t, owner, Observation{Customer: "acc_1", EventID: "e2", DeviceID: "dev", AccountID: "stays", IP: ip1, Now: t0})
	late := t0.Add(60 * 24 * time.Hour)
	if err := owner.Prune(late); err != nil { // stores the records: prune reads the store's index
		t.Fatal(err)
	}
	o := Observation{Customer: "acc_1", EventID: "e3", DeviceID: "dev", AccountID: "stays", IP: ip1, Now: late}
	seedMirror(t, owner, holder, fd, 1, o)
	observe(t, owner, o)
	fd.drain(holder.MirrorApply)
	at := t0.Add(91 * 24 * time.Hour)
	if err := owner.Prune(at); err != nil {
		t.Fatal(err)
	}
	present, absent := map[string]bool{}, map[string]bool{}
	for _, p := range fd.drain(holder.MirrorApply) {
		for _, r := range p.Records {
			rec, err := storage.ParseHistParcel(r.Parcel)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%T", rec)
			switch rec := rec.(type) {
			case *storage.HistCustomerDevice:
				name += " " + rec.Device
				if !r.Absent && len(rec.Days) != 1 {
					t.Fatalf("pushed device not trimmed: %+v", rec)
				}
			case *storage.HistAddress:
				name += " " + rec.Addr.String()
			case *storage.HistAccount:
				if rec.Hash == hashOf(owner, "acc_1", "gone") {
					name += " gone"
				} else {
					name += " stays"
				}
			}
			if r.Absent {
				absent[name] = true
			} else {
				present[name] = true
			}
		}
	}
	for _, n := range []string{"*storage.HistCustomerDevice old", "*storage.HistAccount gone", "*storage.HistAddress " + ip2.String()} {
		if !absent[n] {
			t.Errorf("%s not pushed absent (absent %v, present %v)", n, absent, present)
		}
	}
	if !present["*storage.HistCustomerDevice dev"] {
		t.Errorf("trimmed device not pushed (present %v)", present)
	}
	// The mirror answers as the owner does after the prune.
	o = Observation{Customer: "acc_1", EventID: "e4", DeviceID: "old", AccountID: "stays", IP: ip1, Now: at}
	mf, err := holder.MirrorObserve(o)
	if err != nil {
		t.Fatal(err)
	}
	if of := observe(t, owner, o); mf != of {
		t.Fatalf("after prune: mirror %+v, owner %+v", mf, of)
	}
}

// TestUnwatchStopsFeed: a dropped watcher hears nothing more; the others
// still do.
func TestUnwatchStopsFeed(t *testing.T) {
	owner := newClient(t, Config{Shards: 2})
	fd := newFeed(owner)
	a := Observation{Customer: "acc_a", DeviceID: "d", AccountID: "u", Now: t0}
	b := Observation{Customer: "acc_b", DeviceID: "d", AccountID: "u", Now: t0}
	for _, w := range []uint64{1, 2} {
		for _, o := range []Observation{a, b} {
			if err := owner.Watch(o.Customer, w, keysOf(o)); err != nil {
				t.Fatal(err)
			}
		}
	}
	who := func() map[string]int {
		observe(t, owner, a)
		observe(t, owner, b)
		got := map[string]int{}
		for _, p := range fd.drain(nil) {
			if len(p.Records) > 0 && !p.Reset {
				got[fmt.Sprintf("%s/%d", p.Customer, p.Watcher)]++
			}
		}
		return got
	}
	fd.drain(nil) // the snapshots (empty records: absent)
	if got := who(); len(got) != 4 {
		t.Fatalf("before unwatch: %v", got)
	}
	owner.Unwatch("acc_a", 1)
	if got := who(); len(got) != 3 || got["acc_a/1"] != 0 {
		t.Fatalf("after Unwatch(acc_a, 1): %v", got)
	}
	owner.UnwatchAll(2)
	if got := who(); len(got) != 1 || got["acc_b/1"] != 1 {
		t.Fatalf("after UnwatchAll(2): %v", got)
	}
}

// TestWatchSnapshot: Watch pushes the named records and the account's
// related ones, present or absent, to the new watcher alone.
func TestWatchSnapshot(t *testing.T) {
	owner := newClient(t, Config{Shards: 2})
	fd := newFeed(owner)
	observe(t, owner, Observation{Customer: "acc_1", EventID: "e1", DeviceID: "other", AccountID: "u", IP: ip2, Now: t0})
	if err := owner.Watch("acc_1", 3, MirrorKeys{DeviceID: "new", AccountID: "u", IP: ip1}); err != nil {
		t.Fatal(err)
	}
	observe(t, owner, Observation{Customer: "acc_1", AccountID: "x", Test: true, Now: t0})
	ps := fd.drain(nil)
	// The marker of a new registration, the snapshot, the records in the
	// owner's memory (a first watch), then (no store: at once) the filter.
	if len(ps) != 4 || !ps[0].Begins || len(ps[0].Records) != 0 || ps[0].Watcher != 3 || ps[0].Customer != "acc_1" {
		t.Fatalf("pushes: %+v", ps)
	}
	ps = ps[1:]
	if ps[0].Watcher != 3 || ps[1].Watcher != 3 || ps[2].Watcher != 3 || len(ps[0].Filter) != 0 || len(ps[1].Filter) != 0 || len(ps[2].Filter) == 0 || len(ps[2].Records) != 0 || ps[0].Begins || ps[1].Begins || ps[2].Begins {
		t.Fatalf("pushes: %+v", ps)
	}
	names := func(p MirrorPush) string {
		got := map[string]bool{} // name → absent
		for _, r := range p.Records {
			rec, err := storage.ParseHistParcel(r.Parcel)
			if err != nil {
				t.Fatal(err)
			}
			switch rec := rec.(type) {
			case *storage.HistCustomerDevice:
				got["dev "+rec.Device] = r.Absent
			case *storage.HistAccount:
				got["account"] = r.Absent
			case *storage.HistAddress:
				got["addr "+rec.Addr.String()] = r.Absent
			}
		}
		return fmt.Sprint(got)
	}
	want := map[string]bool{"dev new": true, "account": false, "dev other": false, "addr " + ip1.String(): true, "addr " + ip2.String(): false}
	if got := names(ps[0]); got != fmt.Sprint(want) {
		t.Fatalf("snapshot %v, want %v", got, want)
	}
	hot := map[string]bool{"account": false, "dev other": false, "addr " + ip2.String(): false}
	if got := names(ps[1]); got != fmt.Sprint(hot) {
		t.Fatalf("records in memory %v, want %v", got, hot)
	}
	// A re-watch of the same registration: its snapshot alone.
	if err := owner.Watch("acc_1", 3, MirrorKeys{DeviceID: "other"}); err != nil {
		t.Fatal(err)
	}
	observe(t, owner, Observation{Customer: "acc_1", AccountID: "x", Test: true, Now: t0})
	if ps := fd.drain(nil); len(ps) != 1 || ps[0].Begins || names(ps[0]) != fmt.Sprint(map[string]bool{"dev other": false}) {
		t.Fatalf("a re-watch pushed %+v", ps)
	}
	// After an unwatch the same watcher begins a new registration.
	owner.Unwatch("acc_1", 3)
	if err := owner.Watch("acc_1", 3, MirrorKeys{DeviceID: "other"}); err != nil {
		t.Fatal(err)
	}
	observe(t, owner, Observation{Customer: "acc_1", AccountID: "x", Test: true, Now: t0})
	if ps := fd.drain(nil); len(ps) == 0 || !ps[0].Begins || ps[0].Watcher != 3 {
		t.Fatalf("a watch after an unwatch pushed %+v", ps)
	}
	// Bad input is refused.
	if err := owner.Watch("", 1, MirrorKeys{DeviceID: "d"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty customer: %v", err)
	}
}

// TestWatchPushesHotRecords: a first watch is sent the customer's records
// in the owner's memory, newest first, at most maxHotRecords, at most
// hotChunk to a push, and no other customer's.
func TestWatchPushesHotRecords(t *testing.T) {
	owner := newClient(t, Config{Shards: 1, IdleAfter: 24 * time.Hour})
	fd := newFeed(owner)
	const n = 2*maxHotRecords + 300 // past the walk's cut-back too
	for i := range n {
		observe(t, owner, Observation{Customer: "acc_1", AccountID: fmt.Sprintf("u_%d", i), Now: t0.Add(time.Duration(i) * time.Second)})
		if i%1000 == 0 {
			observe(t, owner, Observation{Customer: "acc_2", AccountID: fmt.Sprintf("u_%d", i), Now: t0})
		}
	}
	if err := owner.Watch("acc_1", 1, MirrorKeys{}); err != nil {
		t.Fatal(err)
	}
	observe(t, owner, Observation{Customer: "acc_1", AccountID: "x", Test: true, Now: t0})
	got := map[storage.AccountHash]bool{}
	for _, p := range fd.drain(nil) {
		if p.Customer != "acc_1" || p.Watcher != 1 || len(p.Records) > hotChunk {
			t.Fatalf("a push to %d of %s with %d records", p.Watcher, p.Customer, len(p.Records))
		}
		for _, r := range p.Records {
			rec, err := storage.ParseHistParcel(r.Parcel)
			if err != nil {
				t.Fatal(err)
			}
			a, ok := rec.(*storage.HistAccount)
			if !ok || r.Absent || a.Customer != "acc_1" {
				t.Fatalf("pushed %+v (absent %v)", rec, r.Absent)
			}
			got[a.Hash] = true
		}
	}
	if len(got) != maxHotRecords {
		t.Fatalf("%d records pushed, want %d", len(got), maxHotRecords)
	}
	for i := n - maxHotRecords; i < n; i++ {
		if h := accountHash(t, owner, "acc_1", fmt.Sprintf("u_%d", i)); !got[h] {
			t.Fatalf("u_%d, among the newest, not pushed", i)
		}
	}
}

// TestMirrorApplyDropsBadRecords: a parcel that does not parse, or is
// another customer's, is not mirrored; a MirrorDrop forgets the customer.
func TestMirrorApplyDropsBadRecords(t *testing.T) {
	holder := newClient(t, Config{Shards: 1})
	other, err := storage.AppendHistParcel(nil, &storage.HistCustomerDevice{Customer: "acc_2", Device: "d"})
	if err != nil {
		t.Fatal(err)
	}
	holder.MirrorApply(MirrorPush{Customer: "acc_1", Records: []MirrorRecord{{Parcel: []byte{1, 2, 3}}, {Parcel: other}}})
	o := Observation{Customer: "acc_1", DeviceID: "d", Now: t0}
	if _, err := holder.MirrorObserve(o); !errors.Is(err, ErrNotMirrored) {
		t.Fatalf("bad records mirrored: %v", err)
	}
	own, err := storage.AppendHistParcel(nil, &storage.HistCustomerDevice{Customer: "acc_1", Device: "d"})
	if err != nil {
		t.Fatal(err)
	}
	holder.MirrorApply(MirrorPush{Customer: "acc_1", Records: []MirrorRecord{{Parcel: own, Absent: true}}})
	if f, err := holder.MirrorObserve(o); err != nil || f.History.Visits != 1 {
		t.Fatalf("absent device: %+v %v", f, err)
	}
	holder.MirrorDrop("acc_1")
	if _, err := holder.MirrorObserve(o); !errors.Is(err, ErrNotMirrored) {
		t.Fatalf("after drop: %v", err)
	}
	if f, err := holder.MirrorObserve(Observation{Customer: "acc_1", Now: t0}); err != nil || f != (Facts{}) {
		t.Fatalf("nothing to observe: %+v %v", f, err)
	}
}

// mirrorStep is a chained observation asking for the mirror.
type mirrorStep struct {
	p   Prepared
	got chan error
	f   Facts
}

func (m *mirrorStep) Fail(err error)              { m.got <- err }
func (m *mirrorStep) ObserveReq() *Prepared       { return &m.p }
func (m *mirrorStep) Observed(f Facts, err error) { m.f = f; m.got <- err }

// TestObserveThenMirror: ObserveThen with SetMirror answers from the
// mirror and records nothing.
func TestObserveThenMirror(t *testing.T) {
	owner := newClient(t, Config{Shards: 2})
	holder := newClient(t, Config{Shards: 2})
	fd := newFeed(owner)
	o := Observation{Customer: "acc_1", EventID: "e1", DeviceID: "d", AccountID: "u", IP: ip1, Now: t0}
	run := func() (Facts, error) {
		st := &mirrorStep{got: make(chan error, 1)}
		if err := holder.Prepare(o, &st.p); err != nil {
			t.Fatal(err)
		}
		st.p.SetMirror(true)
		holder.ObserveThen(st)
		err := <-st.got
		return st.f, err
	}
	if _, err := run(); !errors.Is(err, ErrNotMirrored) {
		t.Fatalf("unmirrored: %v", err)
	}
	observe(t, owner, o)
	seedMirror(t, owner, holder, fd, 1, o)
	o.EventID, o.Now = "e2", t0.Add(time.Minute)
	f, err := run()
	if err != nil {
		t.Fatal(err)
	}
	if of := observe(t, owner, o); f != of || f.History.Visits != 2 {
		t.Fatalf("chained mirror %+v, owner %+v", f, of)
	}
	if n := holder.resident(); n != 0 {
		t.Fatalf("the holder recorded %d entries", n)
	}
}

// TestMirrorNeedsRelated: a device the account lists but the mirror lacks
// makes the answer unknown, not a count without it.
func TestMirrorNeedsRelated(t *testing.T) {
	holder := newClient(t, Config{Shards: 1})
	h := hashOf(holder, "acc_1", "u")
	parcel := func(r storage.HistRecord) MirrorRecord {
		b, err := storage.AppendHistParcel(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		return MirrorRecord{Parcel: b}
	}
	now := t0.Unix()
	holder.MirrorApply(MirrorPush{Customer: "acc_1", Records: []MirrorRecord{
		parcel(&storage.HistCustomerDevice{Customer: "acc_1", Device: "d"}),
		parcel(&storage.HistAccount{Customer: "acc_1", Hash: h, FirstCheck: now, LastCheck: now, Devices: []storage.SeenDevice{{ID: "x", Last: now}}}),
	}})
	o := Observation{Customer: "acc_1", DeviceID: "d", AccountID: "u", Now: t0.Add(time.Minute)}
	if _, err := holder.MirrorObserve(o); !errors.Is(err, ErrNotMirrored) {
		t.Fatalf("related device missing: %v", err)
	}
	holder.MirrorApply(MirrorPush{Customer: "acc_1", Records: []MirrorRecord{
		parcel(&storage.HistCustomerDevice{Customer: "acc_1", Device: "x", LastSeen: now,
			Days:     []storage.DayVisits{{Day: storage.DayOf(t0), N: 1, First: now}},
			Accounts: []storage.SeenAccount{{Hash: h, Last: now}, {Hash: storage.AccountHash{9}, Last: now}}}),
	}})
	f, err := holder.MirrorObserve(o)
	if err != nil || f.RelatedAccounts90d != 1 || !f.NewDevice {
		t.Fatalf("with the related device: %+v %v", f, err)
	}
}

// TestMergePushesMerged: records merged into the owner are pushed, and the
// mirror answers as the owner does after the merge.
func TestMergePushesMerged(t *testing.T) {
	owner := newClient(t, Config{Shards: 2})
	other := newClient(t, Config{Shards: 2})
	holder := newClient(t, Config{Shards: 2})
	fd := newFeed(owner)
	o := Observation{Customer: "acc_1", EventID: "e1", DeviceID: "d", AccountID: "u", IP: ip1, Now: t0}
	observe(t, owner, o)
	seedMirror(t, owner, holder, fd, 1, o)
	observe(t, other, Observation{Customer: "acc_1", EventID: "e2", DeviceID: "d", AccountID: "v", IP: ip1, Now: t0.Add(time.Minute)})
	recs := take(t, other, all, t0.Add(2*time.Minute))
	if err := owner.Merge(recs, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	ps := fd.drain(holder.MirrorApply)
	n := 0
	for _, p := range ps {
		n += len(p.Records)
	}
	if n != len(recs) {
		t.Fatalf("%d records merged, %d pushed: %+v", len(recs), n, ps)
	}
	o.EventID, o.Now = "e3", t0.Add(3*time.Minute)
	mf, err := holder.MirrorObserve(o)
	if err != nil {
		t.Fatal(err)
	}
	if of := observe(t, owner, o); mf != of || of.History.Visits != 3 || of.RelatedAccounts90d != 1 {
		t.Fatalf("after merge: mirror %+v, owner %+v", mf, of)
	}
}

// TestMirrorSweepsIdle: a mirror entry neither read nor written for
// IdleAfter is forgotten (the holder seeds it again); one read stays.
func TestMirrorSweepsIdle(t *testing.T) {
	holder := newClient(t, Config{Shards: 1, IdleAfter: time.Hour})
	for _, dev := range []string{"read", "idle"} {
		b, err := storage.AppendHistParcel(nil, &storage.HistCustomerDevice{Customer: "acc_1", Device: dev})
		if err != nil {
			t.Fatal(err)
		}
		holder.MirrorApply(MirrorPush{Customer: "acc_1", Records: []MirrorRecord{{Parcel: b, Absent: true}}})
	}
	holder.Sweep(t0) // stamps what was written before the shard knew a time
	at := func(dev string, d time.Duration) error {
		_, err := holder.MirrorObserve(Observation{Customer: "acc_1", DeviceID: dev, Now: t0.Add(d)})
		return err
	}
	if err := at("read", 50*time.Minute); err != nil {
		t.Fatal(err)
	}
	holder.Sweep(t0.Add(90 * time.Minute))
	if err := at("idle", 91*time.Minute); !errors.Is(err, ErrNotMirrored) {
		t.Fatalf("idle entry kept: %v", err)
	}
	if err := at("read", 91*time.Minute); err != nil {
		t.Fatalf("entry read within IdleAfter dropped: %v", err)
	}
	if n := holder.resident(); n != 0 {
		t.Fatalf("mirror entries counted as resident: %d", n)
	}
}

// TestRestartResetsWatchers: a panic restart of an owner's shard tells its
// watchers to drop their copies (a change the panic cut short was never
// pushed) and forgets them; the holder's next read of the customer misses.
func TestRestartResetsWatchers(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	owner := newClient(t, Config{Shards: 1, Store: panickyStore{&failingStore{DB: db}}, Timeout: 300 * time.Millisecond})
	holder := newClient(t, Config{Shards: 1})
	fd := newFeed(owner)
	o := Observation{Customer: "acc_1", EventID: "e1", DeviceID: "dev", AccountID: "u", IP: ip1, Now: t0}
	observe(t, owner, o)
	seedMirror(t, owner, holder, fd, 1, o)
	o.EventID = "e2"
	if _, err := holder.MirrorObserve(o); err != nil {
		t.Fatalf("mirror before the restart: %v", err)
	}
	if _, err := owner.Observe(Observation{Customer: "acc_1", DeviceID: "boom", EventID: "e3", Now: t0}); err == nil {
		t.Fatal("an observation whose load panicked answered")
	}
	var ps []MirrorPush
	for i := 0; len(ps) == 0; i++ {
		if i == 100 {
			t.Fatal("no push after the shard's panic restart")
		}
		time.Sleep(10 * time.Millisecond)
		// The watch's filter may come before: not what this is about.
		ps = slices.DeleteFunc(fd.drain(holder.MirrorApply), func(p MirrorPush) bool { return len(p.Filter) > 0 })
	}
	if len(ps) != 1 || !ps[0].Reset || ps[0].Watcher != 1 || ps[0].Customer != "acc_1" {
		t.Fatalf("pushes after the restart: %+v", ps)
	}
	if _, err := holder.MirrorObserve(o); !errors.Is(err, ErrNotMirrored) {
		t.Fatalf("mirror after the reset: %v", err)
	}
	observe(t, owner, o)
	if ps := fd.drain(nil); len(ps) != 0 {
		t.Fatalf("the feed went on after the restart: %+v", ps)
	}
}

// TestPushEventReachesWatchers: a pushed event goes to each watcher of its
// customer with the customer's record of its device, present or absent,
// after what the shard pushed before; a customer nobody watches gets
// nothing.
func TestPushEventReachesWatchers(t *testing.T) {
	owner := newClient(t, Config{Shards: 1})
	holder := newClient(t, Config{Shards: 1})
	fd := newFeed(owner)
	owner.PushEvent("acc_1", "dev", []byte("before any watch"))
	o := Observation{Customer: "acc_1", EventID: "e1", DeviceID: "dev", AccountID: "u", IP: ip1, Now: t0}
	observe(t, owner, o)
	seedMirror(t, owner, holder, fd, 7, o)
	owner.PushEvent("acc_1", "dev", []byte("known device"))
	owner.PushEvent("acc_1", "new-dev", []byte("new device"))
	owner.PushEvent("acc_2", "dev", []byte("nobody watches"))
	observe(t, owner, Observation{Customer: "acc_1", AccountID: "probe", Test: true, Now: t0})
	ps := fd.drain(holder.MirrorApply)
	if len(ps) != 2 {
		t.Fatalf("pushes: %+v", ps)
	}
	for i, want := range []struct {
		event  string
		absent bool
	}{{"known device", false}, {"new device", true}} {
		p := ps[i]
		if p.Watcher != 7 || p.Customer != "acc_1" || string(p.Event) != want.event || len(p.Records) != 1 || p.Records[0].Absent != want.absent {
			t.Fatalf("push %d: %+v", i, p)
		}
	}
	// The holder now knows the new device is absent: an observation of it
	// with the account it knows is answered from the mirror.
	o.DeviceID, o.EventID = "new-dev", "e2"
	f, err := holder.MirrorObserve(o)
	if err != nil || !f.Device || f.History.Visits != 1 || !f.NewDevice {
		t.Fatalf("the new device from the mirror: %+v %v", f, err)
	}
}

// TestIsWatched follows the customer's watchers: a watch makes it watched,
// the last unwatch or a take ends it.
func TestIsWatched(t *testing.T) {
	owner := newClient(t, Config{Shards: 2})
	holder := newClient(t, Config{Shards: 2})
	fd := newFeed(owner)
	o := Observation{Customer: "acc_1", EventID: "e1", DeviceID: "dev", AccountID: "u", IP: ip1, Now: t0}
	if owner.IsWatched("acc_1") {
		t.Fatal("watched before any watch")
	}
	seedMirror(t, owner, holder, fd, 1, o)
	seedMirror(t, owner, holder, fd, 2, o)
	if !owner.IsWatched("acc_1") || owner.IsWatched("acc_2") {
		t.Fatal("after two watches of acc_1")
	}
	owner.Unwatch("acc_1", 1)
	observe(t, owner, Observation{Customer: "acc_1", AccountID: "probe", Test: true, Now: t0})
	if !owner.IsWatched("acc_1") {
		t.Fatal("unwatched while watcher 2 still watches")
	}
	owner.UnwatchAll(2)
	observe(t, owner, Observation{Customer: "acc_1", AccountID: "probe", Test: true, Now: t0})
	if owner.IsWatched("acc_1") {
		t.Fatal("watched after every watcher left")
	}
	seedMirror(t, owner, holder, fd, 3, o)
	if _, err := owner.Take(func(c string) bool { return c == "acc_1" }, t0); err != nil {
		t.Fatal(err)
	}
	if owner.IsWatched("acc_1") {
		t.Fatal("watched after a take")
	}
}

// accountHash is the hash the owner files the customer's end-user account
// under.
func accountHash(t *testing.T, c *Client, customer, accountID string) storage.AccountHash {
	t.Helper()
	var q obsReq
	if err := c.prepare(Observation{Customer: customer, AccountID: accountID}, &q); err != nil {
		t.Fatal(err)
	}
	return q.acct
}
