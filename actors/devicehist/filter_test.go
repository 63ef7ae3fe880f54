package devicehist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// waitFilters waits until the owner's filter builds are handed back and
// the customer's shard sent what it had (the feed then holds the filters).
func waitFilters(t testing.TB, owner *Client, customer string) {
	t.Helper()
	// The shard has run what was sent before (a watch starts its build
	// there) once it answers this.
	observe(t, owner, Observation{Customer: customer, AccountID: "probe", Test: true, Now: t0})
	for i := 0; owner.builder.running.Load() > 0; i++ {
		if i == 5000 {
			t.Fatal("filter builds still running after 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	observe(t, owner, Observation{Customer: customer, AccountID: "probe", Test: true, Now: t0})
}

// filterPushes counts the pushes carrying a filter.
func filterPushes(ps []MirrorPush) int {
	n := 0
	for _, p := range ps {
		if len(p.Filter) > 0 {
			n++
			if len(p.Records) > 0 {
				panic("a filter push with records")
			}
		}
	}
	return n
}

// TestMirrorFilterFromStore: the filter of a store-backed owner names the
// records only its store holds (stored, then evicted from its memory): the
// holder reads them as maybe present and asks (ErrNotMirrored); those only
// its memory holds (their write failed) came with the first watch; records
// the owner holds nowhere are answered from the mirror as new, as the
// owner answers them, with no watch of theirs.
func TestMirrorFilterFromStore(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	st := &failingStore{DB: db}
	owner := newClient(t, Config{Shards: 2, Store: st, IdleAfter: time.Minute})
	holder := newClient(t, Config{Shards: 2})
	fd := newFeed(owner)
	observe(t, owner, Observation{Customer: "acc_1", EventID: "e1", DeviceID: "stored", AccountID: "u_stored", IP: ip2, Now: t0})
	observe(t, owner, Observation{Customer: "acc_10", EventID: "e1", DeviceID: "other", AccountID: "u_other", Now: t0})
	owner.flush()
	owner.Sweep(t0.Add(time.Hour))
	if n := owner.resident(); n != 0 {
		t.Fatalf("%d entries still in the owner's memory", n)
	}
	st.fail.Store(true)
	observe(t, owner, Observation{Customer: "acc_1", EventID: "e2", DeviceID: "unstored", AccountID: "u_unstored", Now: t0.Add(time.Hour)})
	owner.flush() // fails: only the owner's memory holds these
	st.fail.Store(false)

	now := t0.Add(time.Hour + time.Minute)
	o := Observation{Customer: "acc_1", EventID: "e3", DeviceID: "watched", AccountID: "u_watched", IP: ip1, Now: now}
	if err := owner.Watch("acc_1", 1, keysOf(o)); err != nil {
		t.Fatal(err)
	}
	waitFilters(t, owner, "acc_1")
	if n := filterPushes(fd.drain(holder.MirrorApply)); n != 1 {
		t.Fatalf("%d filter pushes, want 1", n)
	}

	// Held nowhere at the owner, named by no watch: answered here.
	fresh := Observation{Customer: "acc_1", EventID: "e4", DeviceID: "brand-new", AccountID: "u_new", IP: netip.MustParseAddr("198.51.100.7"), Now: now}
	mf, err := holder.MirrorObserve(fresh)
	if err != nil {
		t.Fatalf("a record the owner holds nowhere: %v", err)
	}
	if of := observe(t, owner, fresh); mf != of {
		t.Fatalf("new records: mirror %+v, owner %+v", mf, of)
	}
	// Held in the owner's store alone, never pushed here: maybe present,
	// so asked.
	for _, q := range []Observation{
		{DeviceID: "stored"}, {AccountID: "u_stored"}, {AccountID: "u_x", IP: ip2},
	} {
		q.Customer, q.Now = "acc_1", now
		if _, err := holder.MirrorObserve(q); !errors.Is(err, ErrNotMirrored) {
			t.Errorf("%+v, held by the owner: %v, want ErrNotMirrored", q, err)
		}
	}
	// Held in the owner's memory: pushed with the first watch, answered.
	for _, q := range []Observation{{DeviceID: "unstored"}, {AccountID: "u_unstored"}} {
		q.Customer, q.Now = "acc_1", now
		if _, err := holder.MirrorObserve(q); err != nil {
			t.Errorf("%+v, in the owner's memory: %v", q, err)
		}
	}
	// A re-watch of the same registration builds no other filter.
	if err := owner.Watch("acc_1", 1, keysOf(fresh)); err != nil {
		t.Fatal(err)
	}
	waitFilters(t, owner, "acc_1")
	if n := filterPushes(fd.drain(holder.MirrorApply)); n != 0 {
		t.Fatalf("a re-watch sent %d filters", n)
	}
}

// TestMirrorFilterSweepSafe: a record pushed after the filter came is
// added to it, so once the holder sweeps it as idle the filter still says
// it may exist (asked, not answered as new); the filter itself stays while
// the customer's mirror is in use.
func TestMirrorFilterSweepSafe(t *testing.T) {
	owner := newClient(t, Config{Shards: 1})
	holder := newClient(t, Config{Shards: 1, IdleAfter: time.Hour})
	fd := newFeed(owner)
	seedMirror(t, owner, holder, fd, 1, Observation{Customer: "acc_1", DeviceID: "kept", Now: t0})
	holder.Sweep(t0)
	observe(t, owner, Observation{Customer: "acc_1", EventID: "e1", DeviceID: "later", AccountID: "u", IP: ip1, Now: t0})
	if n := len(fd.drain(holder.MirrorApply)); n != 1 {
		t.Fatalf("%d pushes of the new records", n)
	}
	at := func(d time.Duration, o Observation) error {
		o.Customer, o.Now = "acc_1", t0.Add(d)
		_, err := holder.MirrorObserve(o)
		return err
	}
	if err := at(50*time.Minute, Observation{DeviceID: "kept"}); err != nil {
		t.Fatal(err)
	}
	holder.Sweep(t0.Add(90 * time.Minute))
	for _, o := range []Observation{{DeviceID: "later"}, {AccountID: "u"}, {AccountID: "v", IP: ip1}} {
		if err := at(91*time.Minute, o); !errors.Is(err, ErrNotMirrored) {
			t.Errorf("%+v swept here, held by the owner: %v, want ErrNotMirrored", o, err)
		}
	}
	if err := at(91*time.Minute, Observation{DeviceID: "brand-new", AccountID: "v", IP: ip2}); err != nil {
		t.Fatalf("the filter went with the swept entries: %v", err)
	}
	// MirrorDrop drops the filter with the mirror.
	holder.MirrorDrop("acc_1")
	if err := at(92*time.Minute, Observation{DeviceID: "brand-new"}); !errors.Is(err, ErrNotMirrored) {
		t.Fatalf("after MirrorDrop: %v", err)
	}
}

// header is an encoded filter's header declaring m bits and k functions.
func header(m, k uint64) []byte {
	b := []byte{filterFormat}
	b = binary.BigEndian.AppendUint64(b, m)
	return binary.BigEndian.AppendUint64(b, k)
}

// TestMirrorFilterRefusesOversized: a filter declaring more than
// maxFilterBits bits or maxFilterK functions, or not as long as it
// declares, is refused before its bits are allocated; the holder keeps no
// filter then.
func TestMirrorFilterRefusesOversized(t *testing.T) {
	words := func(m uint64) []byte { return make([]byte, 8*((m+63)/64)) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"2^62 bits", header(1<<62, 7)},
		{"one bit too many", append(header(maxFilterBits+1, 7), words(maxFilterBits+1)...)},
		{"33 functions", append(header(1024, maxFilterK+1), words(1024)...)},
		{"no functions", append(header(1024, 0), words(1024)...)},
		{"no bits", header(0, 7)},
		{"short", append(header(1024, 7), words(512)...)},
		{"long", append(header(1024, 7), words(2048)...)},
		{"unknown format", append(append([]byte{2}, header(1024, 7)[1:]...), words(1024)...)},
		{"cut header", header(1024, 7)[:12]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			f, err := decodeFilter(tc.b)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("accepted: %d bits, %d functions", f.Cap(), f.K())
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<16 {
				t.Fatalf("refusing it allocated %d bytes", n)
			}
		})
	}
	holder := newClient(t, Config{Shards: 1})
	holder.MirrorApply(MirrorPush{Customer: "acc_1", Filter: header(1<<62, 7)})
	if _, err := holder.MirrorObserve(Observation{Customer: "acc_1", DeviceID: "d", Now: t0}); !errors.Is(err, ErrNotMirrored) {
		t.Fatalf("after a refused filter: %v", err)
	}
	// The largest allowed decodes.
	f, err := decodeFilter(append(header(maxFilterBits, maxFilterK), words(maxFilterBits)...))
	if err != nil || f.Cap() != maxFilterBits {
		t.Fatalf("the largest filter: %v", err)
	}
}

// FuzzMirrorFilter: any bytes from another machine decode into a filter
// within the bounds that encodes back to them, or are refused; nothing
// panics, and testing or adding a key to a decoded filter works.
func FuzzMirrorFilter(f *testing.F) {
	good := bloom.New(filterSize(10))
	good.Add(filterDeviceKey(nil, "d"))
	f.Add(encodeFilter(good))
	f.Add(header(1<<62, 7))
	f.Add(append(header(64, 3), make([]byte, 8)...))
	f.Add(append(header(65, 3), make([]byte, 16)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, err := decodeFilter(b)
		if err != nil {
			return
		}
		if fl.Cap() == 0 || fl.Cap() > maxFilterBits || fl.K() == 0 || fl.K() > maxFilterK {
			t.Fatalf("accepted %d bits, %d functions", fl.Cap(), fl.K())
		}
		if !bytes.Equal(encodeFilter(fl), b) {
			t.Fatal("does not encode back to its bytes")
		}
		key := filterAccountKey(nil, storage.AccountHash{1})
		fl.Test(key)
		fl.Add(key)
		if !fl.Test(key) {
			t.Fatal("an added key is surely absent")
		}
		// As a holder keeps it: keys pushed later are never surely
		// absent, and the layers stay within their bound.
		e := newExistence(fl)
		for i := range 64 {
			k := filterAccountKey(nil, storage.AccountHash{byte(i), 2})
			e.add(k)
			if !e.test(k) {
				t.Fatal("a key added to the holder's filter is surely absent")
			}
		}
		if e.bits > maxExistenceBits {
			t.Fatalf("%d bits of layers", e.bits)
		}
	})
}

// TestFilterSize: a filter is sized for 1% and never encodes past
// maxFilterBytes, up to maxFilterRecords.
func TestFilterSize(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 100_000, 2_000_000, maxFilterRecords} {
		m, k := filterSize(n)
		if size := filterHeader + 8*int((m+63)/64); size > maxFilterBytes {
			t.Fatalf("%d records: %d bytes", n, size)
		}
		if fp := bloom.EstimateFalsePositiveRate(m, k, uint(max(n, 1))); n <= 2_000_000 && fp > 0.0125 || fp > 0.06 {
			t.Fatalf("%d records: %d bits, %d functions: false positives %.4f", n, m, k, fp)
		}
	}
}

// BenchmarkMirrorFilterBuild measures an owner's filter of a customer with
// ~100k stored records (a barrier, two scans, the encoding).
func BenchmarkMirrorFilterBuild(b *testing.B) {
	db := openDBWith(b, vfs.NewMem(), time.Hour)
	defer db.Close()
	owner := newClient(b, Config{Shards: 1, Store: db})
	for i := range 33_334 { // device, account and address each: ~100k records
		observe(b, owner, Observation{Customer: "acc_1", EventID: fmt.Sprint(i), DeviceID: fmt.Sprintf("d%d", i), AccountID: fmt.Sprintf("u%d", i),
			IP: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Now: t0})
	}
	owner.flush()
	b.ResetTimer()
	var size int
	for b.Loop() {
		f, n, err := owner.builder.build("acc_1", actors.HashString("acc_1"))
		if err != nil || n < 100_000 {
			b.Fatalf("%d records: %v", n, err)
		}
		size = len(encodeFilter(f))
	}
	b.ReportMetric(float64(size), "filter-bytes")
}

// blindStore's scans see no record, as a scan that ran before the records
// were stored.
type blindStore struct{ *storage.DB }

func (blindStore) HistIdentitiesOf(string, func(storage.HistKind, []byte) bool) error { return nil }

// TestMirrorFilterKeepsPushedDuringBuild: records created while a filter
// is built, pushed, then stored and evicted from the owner's memory
// before it is sent, and which its scan did not see, are in the filter
// all the same (the shard notes what it pushes meanwhile).
func TestMirrorFilterKeepsPushedDuringBuild(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	owner := newClient(t, Config{Shards: 1, Store: blindStore{db}, IdleAfter: time.Minute})
	holder := newClient(t, Config{Shards: 1})
	fd := newFeed(owner)
	for range filterBuilds { // the builds wait
		owner.builder.sem <- struct{}{}
	}
	if err := owner.Watch("acc_1", 1, MirrorKeys{DeviceID: "watched"}); err != nil {
		t.Fatal(err)
	}
	late := Observation{Customer: "acc_1", EventID: "e1", DeviceID: "late", AccountID: "u_late", IP: ip1, Now: t0}
	observe(t, owner, late)
	owner.flush()
	owner.Sweep(t0.Add(time.Hour))
	if n := owner.resident(); n != 0 {
		t.Fatalf("%d entries still in the owner's memory", n)
	}
	for range filterBuilds {
		<-owner.builder.sem
	}
	waitFilters(t, owner, "acc_1")
	// The holder keeps the filter alone, as if it had swept the records.
	n := 0
	fd.drain(func(p MirrorPush) {
		if len(p.Filter) > 0 {
			n++
			holder.MirrorApply(p)
		}
	})
	if n != 1 {
		t.Fatalf("%d filters", n)
	}
	for _, o := range []Observation{{DeviceID: "late"}, {AccountID: "u_late"}, {AccountID: "v", IP: ip1}} {
		o.Customer, o.Now = "acc_1", t0.Add(time.Hour)
		if _, err := holder.MirrorObserve(o); !errors.Is(err, ErrNotMirrored) {
			t.Errorf("%+v, pushed during the build: %v, want ErrNotMirrored", o, err)
		}
	}
	if _, err := holder.MirrorObserve(Observation{Customer: "acc_1", DeviceID: "brand-new", Now: t0.Add(time.Hour)}); err != nil {
		t.Fatalf("no usable filter: %v", err)
	}
}

// failingScanStore's scans fail.
type failingScanStore struct{ *storage.DB }

func (failingScanStore) HistIdentitiesOf(string, func(storage.HistKind, []byte) bool) error {
	return errors.New("injected scan failure")
}

// TestMirrorFilterScanFails: when the owner cannot scan the customer's
// records it sends no filter (said once in its log), and the holder
// misses records it lacks as without filters.
func TestMirrorFilterScanFails(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	var logged bytes.Buffer
	var mu sync.Mutex
	owner := newClient(t, Config{Shards: 1, Store: failingScanStore{db}, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))})
	holder := newClient(t, Config{Shards: 1})
	fd := newFeed(owner)
	o := Observation{Customer: "acc_1", DeviceID: "watched", Now: t0}
	seedMirror(t, owner, holder, fd, 1, o)
	waitFilters(t, owner, "acc_1")
	if n := filterPushes(fd.drain(holder.MirrorApply)); n != 0 {
		t.Fatalf("%d filters after a failed scan", n)
	}
	if _, err := holder.MirrorObserve(Observation{Customer: "acc_1", DeviceID: "brand-new", Now: t0}); !errors.Is(err, ErrNotMirrored) {
		t.Fatalf("without a filter: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logged.String(), "no existence filter"); n != 1 {
		t.Fatalf("logged %d times: %s", n, logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestMirrorFilterGrows: a filter sized when a young customer was first
// watched grows on the holder as the owner's pushes add records to it, so
// records nobody holds still read as surely absent at about filterFP (and
// never more than twice it), and every pushed record reads as maybe
// present once the holder swept its copy.
func TestMirrorFilterGrows(t *testing.T) {
	owner := newClient(t, Config{Shards: 1})
	holder := newClient(t, Config{Shards: 1, IdleAfter: time.Hour})
	fd := newFeed(owner)
	seedMirror(t, owner, holder, fd, 1, Observation{Customer: "acc_1", AccountID: "u_first", Now: t0})
	const grown = 40_000 // the filter was sized for about 1,000
	for i := range grown {
		observe(t, owner, Observation{Customer: "acc_1", AccountID: fmt.Sprintf("u_%d", i), Now: t0})
		if i%1000 == 999 {
			fd.drain(holder.MirrorApply)
		}
	}
	fd.drain(holder.MirrorApply)
	missed := func(prefix string, n int, at time.Time) int {
		t.Helper()
		misses := 0
		for i := range n {
			_, err := holder.MirrorObserve(Observation{Customer: "acc_1", AccountID: fmt.Sprintf("%s%d", prefix, i), Now: at})
			switch {
			case errors.Is(err, ErrNotMirrored):
				misses++
			case err != nil:
				t.Fatal(err)
			}
		}
		return misses
	}
	const unseen = 20_000
	if n := missed("nobody_", unseen, t0); float64(n) > 2*filterFP*unseen {
		t.Fatalf("%d of %d records nobody holds read as maybe present, want at most %.0f", n, unseen, 2*filterFP*unseen)
	}
	// Stamped at the first sweep, the copies go at the second; the
	// filter, which answered since, stays.
	holder.Sweep(t0)
	if n := missed("nobody_", 100, t0.Add(90*time.Minute)); n > 10 {
		t.Fatalf("%d of 100 read as maybe present", n)
	}
	holder.Sweep(t0.Add(2 * time.Hour))
	if n := missed("u_", grown, t0.Add(2*time.Hour)); n != grown {
		t.Fatalf("%d of %d records the owner holds, swept here, read as maybe present, want all", n, grown)
	}
}

// TestFilled: the keys a filter holds, estimated from its bits; a filter
// with every bit set reads as full.
func TestFilled(t *testing.T) {
	f := bloom.New(filterSize(10_000))
	for i := range 5_000 {
		f.AddString(fmt.Sprint(i))
	}
	if n := filled(f); n < 4_800 || n > 5_200 {
		t.Fatalf("5,000 keys read as %d", n)
	}
	full := bloom.New(64, 3)
	for i := range 64 {
		full.BitSet().Set(uint(i))
	}
	if n := filled(full); n != math.MaxInt {
		t.Fatalf("a full filter read as %d keys", n)
	}
	if e := newExistence(full); e.room > 0 {
		t.Fatalf("a full filter leaves room for %d", e.room)
	}
}

// failingLoadStore's reads of one device's record fail.
type failingLoadStore struct {
	*storage.DB
	device string
}

func (f failingLoadStore) LoadHist(r storage.HistRecord) (storage.HistStored, bool, error) {
	if d, ok := r.(*storage.HistCustomerDevice); ok && d.Device == f.device {
		return storage.HistStored{}, false, errors.New("injected read failure")
	}
	return f.DB.LoadHist(r)
}

// TestWatchSnapshotFailsStillSendsHot: a first watch whose snapshot could
// not be read still begins a registration and is sent the records in the
// owner's memory: a later re-watch is no first watch, so this was the
// registration's only chance to get them.
func TestWatchSnapshotFailsStillSendsHot(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	owner := newClient(t, Config{Shards: 1, Store: failingLoadStore{DB: db, device: "unreadable"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	fd := newFeed(owner)
	observe(t, owner, Observation{Customer: "acc_1", DeviceID: "held", Now: t0})
	if err := owner.Watch("acc_1", 5, MirrorKeys{DeviceID: "unreadable"}); err != nil {
		t.Fatal(err)
	}
	observe(t, owner, Observation{Customer: "acc_1", AccountID: "x", Test: true, Now: t0})
	var begins, hot int
	for _, p := range fd.drain(nil) {
		if p.Watcher != 5 {
			continue
		}
		if p.Begins {
			begins++
		}
		for _, r := range p.Records {
			rec, err := storage.ParseHistParcel(r.Parcel)
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := rec.(*storage.HistCustomerDevice); ok && d.Device == "held" && !r.Absent {
				hot++
			}
		}
	}
	if begins != 1 || hot != 1 {
		t.Fatalf("after a failed snapshot: %d markers, the held device pushed %d times", begins, hot)
	}
}
