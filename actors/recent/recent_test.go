package recent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/storage"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func system(t testing.TB) *actor.RootContext {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet() }))
	t.Cleanup(sys.Shutdown)
	return sys.Root
}

func memDB(t testing.TB, fs vfs.FS) *storage.DB {
	db, err := storage.Open("r", storage.Options{FS: fs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// start runs a client whose flusher never fires by itself: List flushes.
func start(t testing.TB, db Store) *Client {
	c, err := New(system(t), Config{Store: db, FlushEvery: time.Hour, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	return c
}

func entry(account string, i int) *Entry {
	e := &Entry{Account: account, At: t0.Add(time.Duration(i) * time.Second), IP: netip.MustParseAddr("203.0.113.7"),
		Decision: score.Allow, Engine: score.Allow, Risk: uint8(i % 100)}
	e.SetRequestID(fmt.Appendf(nil, "req_%04d", i))
	e.SetCountry("DE")
	return e
}

func ids(es []*storage.Evaluation) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.RequestID
	}
	return out
}

func TestRingKeepsNewest200(t *testing.T) {
	db := memDB(t, vfs.NewMem())
	defer db.Close()
	c := start(t, db)
	for i := 0; i < 250; i++ {
		c.Record(*entry("acc_a", i))
		if i < 3 {
			c.Record(*entry("acc_b", i))
		}
	}
	got, err := c.List(List{Account: "acc_a", Now: t0.Add(time.Hour), Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != Size || got[0].RequestID != "req_0249" || got[Size-1].RequestID != "req_0050" {
		t.Fatalf("ring of %d: first %s last %s", len(got), ids(got)[0], ids(got)[len(got)-1])
	}
	// The store itself holds the ring, no more: the 50 pushed out came in
	// the same batch as the Size newer ones, and were never written.
	if refs, more, err := db.EvaluationRefs("acc_a", 1000); err != nil || len(refs) != Size || more {
		t.Fatalf("stored: %d %v %v", len(refs), more, err)
	}
	if got, _ := c.List(List{Account: "acc_b", Now: t0, Limit: 2}); len(got) != 2 || got[0].RequestID != "req_0002" {
		t.Fatalf("acc_b: %v", ids(got))
	}
	if got, err := c.List(List{Account: "acc_none", Now: t0, Limit: 50}); err != nil || len(got) != 0 {
		t.Fatalf("unknown account: %v %v", got, err)
	}
	// Batches of 50 (each one listed): the entries they push out stay
	// stored until Size of them wait, and one range delete drops them.
	for i := 250; i < 450; i++ {
		c.Record(*entry("acc_a", i))
		if i%50 == 49 {
			if _, err := c.List(List{Account: "acc_a", Now: t0.Add(time.Hour), Limit: 1}); err != nil {
				t.Fatal(err)
			}
			if refs, _, _ := db.EvaluationRefs("acc_a", 1000); i < 449 && len(refs) != Size+i+1-250 {
				t.Fatalf("after entry %d: %d stored, want %d", i, len(refs), Size+i+1-250)
			}
		}
	}
	if got, err := c.List(List{Account: "acc_a", Now: t0.Add(time.Hour), Limit: 500}); err != nil || len(got) != Size || got[0].RequestID != "req_0449" || got[Size-1].RequestID != "req_0250" {
		t.Fatalf("after a trim: %v %v", ids(got), err)
	}
	if refs, more, err := db.EvaluationRefs("acc_a", 1000); err != nil || len(refs) != Size || more {
		t.Fatalf("stored after a trim: %d %v %v", len(refs), more, err)
	}
}

// TestOneKeyPerEntry: a busy account writes one key per entry, plus one
// range delete per Size entries, not a put and a point delete each.
func TestOneKeyPerEntry(t *testing.T) {
	db := memDB(t, vfs.NewMem())
	defer db.Close()
	c := start(t, db)
	for i := 0; i < Size; i++ {
		c.Record(*entry("acc_a", i))
	}
	if _, err := c.List(List{Account: "acc_a", Now: t0, Limit: 1}); err != nil { // after the ring is full
		t.Fatal(err)
	}
	before := db.WriteStats()
	const n = 10 * Size
	for i := Size; i < Size+n; i++ {
		c.Record(*entry("acc_a", i))
		if i%Size == Size-1 { // a batch per Size entries: each one is listed
			if _, err := c.List(List{Account: "acc_a", Now: t0, Limit: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if keys := db.WriteStats().Keys - before.Keys; keys != n+n/Size {
		t.Fatalf("%d entries wrote %d keys, want %d", n, keys, n+n/Size)
	}
	// One batch of 3×Size: only the newest Size are written.
	before = db.WriteStats()
	for i := Size + n; i < 4*Size+n; i++ {
		c.Record(*entry("acc_a", i))
	}
	got, err := c.List(List{Account: "acc_a", Now: t0.Add(time.Hour), Limit: Size})
	if err != nil || len(got) != Size || got[0].RequestID != fmt.Sprintf("req_%04d", 4*Size+n-1) || got[Size-1].RequestID != fmt.Sprintf("req_%04d", 3*Size+n) {
		t.Fatalf("after a big batch: %d %v", len(got), err)
	}
	if keys := db.WriteStats().Keys - before.Keys; keys > Size+1 {
		t.Fatalf("a batch of %d entries wrote %d keys, want at most %d", 3*Size, keys, Size+1)
	}
	if refs, more, err := db.EvaluationRefs("acc_a", 20*Size); err != nil || len(refs) != Size || more {
		t.Fatalf("stored: %d %v %v", len(refs), more, err)
	}
}

func TestEntryFormatted(t *testing.T) {
	db := memDB(t, vfs.NewMem())
	defer db.Close()
	c := start(t, db)
	pin, err := score.ParsePin("198.51.100.0/24", "", "allow", "office")
	if err != nil {
		t.Fatal(err)
	}
	var rules score.SignalSet
	for _, s := range []string{"vpn", "tor"} {
		r, _ := score.ParseRule(s, "block")
		rules |= 1 << r.Signal
	}
	var reasons score.ReasonSet = 1<<score.ReasonVPNDetected | 1<<score.ReasonAnonymousNetwork

	byRule := entry("acc_a", 1)
	byRule.Decision, byRule.Engine, byRule.Source, byRule.Rule, byRule.RuleMatched, byRule.Reasons = score.Block, score.Review, score.SourceRules, score.SignalVPN, rules, reasons
	byPin := entry("acc_a", 2)
	byPin.Source, byPin.Pin, byPin.Engine = score.SourceException, pin, score.Block
	degraded := entry("acc_a", 3)
	degraded.IP, degraded.Test = netip.Addr{}, true
	degraded.SetCountry("")
	for _, e := range []*Entry{byRule, byPin, degraded} {
		c.Record(*e)
	}
	got, err := c.List(List{Account: "acc_a", Now: t0, Limit: 10})
	if err != nil || len(got) != 3 {
		t.Fatalf("%v %v", got, err)
	}
	d, p, r := got[0], got[1], got[2]
	if r.Decision != "block" || r.EngineDecision != "review" || r.Source != "rules" || r.Rule != "vpn" ||
		fmt.Sprint(r.RuleMatched) != "[vpn tor]" || fmt.Sprint(r.Reasons) != "[anonymous_network vpn_detected]" ||
		r.IP != "203.0.113.7" || r.Country != "DE" || r.RequestID != "req_0001" || r.Risk != 1 || r.Test {
		t.Fatalf("rule entry: %+v", r)
	}
	if p.Source != "exception" || p.Exception != "office" || p.Rule != "" || len(p.RuleMatched) != 0 || p.EngineDecision != "block" {
		t.Fatalf("pin entry: %+v", p)
	}
	if d.IP != "unknown" || d.Country != "" || !d.Test || d.Source != "" || !d.At.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("degraded entry: %+v", d)
	}
}

// TestRingSurvivesRestart: a new owner loads the stored ring, so the cap
// holds across restarts; a store left over the cap is trimmed on load.
func TestRingSurvivesRestart(t *testing.T) {
	fs := vfs.NewMem()
	db := memDB(t, fs)
	c := start(t, db)
	for i := 0; i < 150; i++ {
		c.Record(*entry("acc_a", i))
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = memDB(t, fs)
	defer db.Close()
	// An excess the owner never wrote (say, from a crash between a put and
	// the delete that paired with it).
	var w storage.EvalWrite
	for i := 0; i < 80; i++ {
		w.Put = append(w.Put, &storage.Evaluation{Account: "acc_a", At: t0.Add(-time.Hour).Add(time.Duration(i) * time.Second), Seq: 1, Decision: "allow"})
	}
	if err := db.WriteEvaluations(&w); err != nil {
		t.Fatal(err)
	}
	c = start(t, db)
	for i := 150; i < 160; i++ {
		c.Record(*entry("acc_a", i))
	}
	got, err := c.List(List{Account: "acc_a", Now: t0, Limit: Size})
	if err != nil || len(got) != Size || got[0].RequestID != "req_0159" {
		t.Fatalf("after restart: %d %v", len(got), err)
	}
	// The start trimmed the excess; the 10 the new entries pushed out wait
	// for the next trim.
	if refs, more, _ := db.EvaluationRefs("acc_a", 1000); len(refs) != Size+10 || more {
		t.Fatalf("stored after restart: %d", len(refs))
	}
	// Kept: the 160 recorded entries, then the newest 40 of the 80 extra.
	if got[159].RequestID != "req_0000" || got[160].RequestID != "" || !got[160].At.Equal(t0.Add(-time.Hour).Add(79*time.Second)) ||
		!got[Size-1].At.Equal(t0.Add(-time.Hour).Add(40*time.Second)) {
		t.Fatalf("oldest kept: %+v / %+v / %+v", got[159], got[160], got[Size-1])
	}
}

func TestRetention(t *testing.T) {
	db := memDB(t, vfs.NewMem())
	defer db.Close()
	c := start(t, db)
	c.Record(*entry("acc_a", 0))
	c.Record(*entry("acc_a", 86400*6))
	if got, _ := c.List(List{Account: "acc_a", Now: t0.Add(7*24*time.Hour + time.Minute), Limit: 10}); len(got) != 1 {
		t.Fatalf("an entry past 7 days listed: %v", ids(got))
	}
	if err := c.Prune(t0.Add(8 * 24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if refs, _, _ := db.EvaluationRefs("acc_a", 10); len(refs) != 1 {
		t.Fatalf("prune left %d", len(refs))
	}
}

// TestPendingBounded: past MaxPending the newest are dropped, never queued
// without bound and never blocking evaluate.
func TestPendingBounded(t *testing.T) {
	db := memDB(t, vfs.NewMem())
	defer db.Close()
	c, err := New(system(t), Config{Store: db, FlushEvery: time.Hour, FlushAt: 100, MaxPending: 3, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	for i := 0; i < 10; i++ {
		c.Record(*entry("acc_a", i))
	}
	if got, _ := c.List(List{Account: "acc_a", Now: t0, Limit: 10}); len(got) != 3 || got[0].RequestID != "req_0002" {
		t.Fatalf("kept %v", ids(got))
	}
}

// TestFlushAtHandsOverEarly: a full batch goes to the owner (and the store)
// without waiting for the flusher or a List.
func TestFlushAtHandsOverEarly(t *testing.T) {
	db := memDB(t, vfs.NewMem())
	defer db.Close()
	c, err := New(system(t), Config{Store: db, FlushEvery: time.Hour, FlushAt: 5, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	for i := 0; i < 4; i++ {
		c.Record(*entry("acc_a", i))
	}
	time.Sleep(50 * time.Millisecond)
	if refs, _, _ := db.EvaluationRefs("acc_a", 10); len(refs) != 0 {
		t.Fatalf("%d entries stored before the batch was full", len(refs))
	}
	c.Record(*entry("acc_a", 4))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		refs, _, err := db.EvaluationRefs("acc_a", 10)
		if err == nil && len(refs) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the full batch was not stored: %d entries, %v", len(refs), err)
		}
	}
}

func TestFlusherRunsByItself(t *testing.T) {
	db := memDB(t, vfs.NewMem())
	defer db.Close()
	c, err := New(system(t), Config{Store: db, FlushEvery: time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	c.Record(*entry("acc_a", 1))
	deadline := time.Now().Add(10 * time.Second)
	for {
		refs, _, err := db.EvaluationRefs("acc_a", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a recorded entry never reached the store")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// failing is a store whose writes fail.
type failing struct{ Store }

func (failing) WriteEvaluations(*storage.EvalWrite) error { return storage.ErrUnavailable }

func TestStoreFailureIsNotFatal(t *testing.T) {
	db := memDB(t, vfs.NewMem())
	defer db.Close()
	c := start(t, failing{db})
	c.Record(*entry("acc_a", 1))
	if got, err := c.List(List{Account: "acc_a", Now: t0, Limit: 10}); err != nil || len(got) != 0 {
		t.Fatalf("%v %v", got, err)
	}
	c.Stop()
	if _, err := c.List(List{Account: "acc_a", Now: t0, Limit: 10}); !errors.Is(err, ErrStopped) {
		t.Fatalf("after stop: %v", err)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	db := memDB(t, vfs.NewMem())
	defer db.Close()
	c, err := New(system(t), Config{Store: db, FlushEvery: time.Hour, MaxPending: 1 << 20, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	e := entry("acc_a", 1)
	c.Record(*e) // the first append sizes the buffer
	c.pending = append(make([]Entry, 0, 4096), c.pending...)
	if n := testing.AllocsPerRun(1000, func() { c.Record(*e) }); n != 0 {
		t.Fatalf("Record allocates %.1f", n)
	}
}

// BenchmarkRecordSaturated records as fast as two goroutines can, with the
// flusher and the owner running: once the owner falls behind, Record drops
// (and counts) instead of queueing. It shows contention, not what one
// evaluation pays (BenchmarkRecordSerial).
func BenchmarkRecordSaturated(b *testing.B) {
	db := memDB(b, vfs.NewMem())
	defer db.Close()
	c, err := New(system(b), Config{Store: db, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop()
	e := entry("acc_a", 1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Record(*e)
		}
	})
}

// BenchmarkRecordSerial is Record alone, the owner idle: what one
// evaluation pays.
func BenchmarkRecordSerial(b *testing.B) {
	db := memDB(b, vfs.NewMem())
	defer db.Close()
	c, err := New(system(b), Config{Store: db, FlushEvery: time.Hour, MaxPending: 1 << 20, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop()
	c.pending = make([]Entry, 0, 4096)
	e := entry("acc_a", 1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if len(c.pending) == cap(c.pending) {
			c.pending = c.pending[:0]
		}
		c.Record(*e)
	}
}

// BenchmarkOwnerApply is the owner's work per entry (formatting, the ring,
// the write-behind batch) in batches of 256: CPU spent off the evaluate path.
func BenchmarkOwnerApply(b *testing.B) {
	db := memDB(b, vfs.NewMem())
	defer db.Close()
	c := start(b, db)
	o := &owner{rings: actors.NewTable[string, *ring](64), store: db, log: quiet(), idleAfter: time.Hour, client: c}
	entries := make([]Entry, 256)
	for i := range entries {
		entries[i] = *entry(fmt.Sprintf("acc_%d", i%16), i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(entries) {
		o.apply(&batch{entries: append(c.buffer(len(entries)), entries...)})
	}
}
