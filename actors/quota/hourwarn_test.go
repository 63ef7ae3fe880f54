package quota

import (
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// hourlyBurst makes n live charges of account "a" (hourly limit 10) at now.
func hourlyBurst(t *testing.T, c *Client, now time.Time, n int) {
	t.Helper()
	for range n {
		if _, err := c.Charge(Charge{Account: "a", Bucket: Live, Limits: custom(10, -1), Hourly: true, Total: true, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
}

func warnKinds(ws []Warning) []WarnKind {
	var out []WarnKind
	for _, w := range ws {
		out = append(out, w.Kind)
	}
	return out
}

// TestHourlyWarningsSurviveARestart: SPEC §6 sends each hourly warning (80%
// and the cap) at most once per 24 hours. The time each was sent is stored
// with the account's totals, so a restart of the quota service on the same
// store, with the threshold crossed again in a new hour within 24 hours,
// sends nothing; 24 hours after the first, both are sent again. Before,
// the times were in memory only and the restart sent both again.
func TestHourlyWarningsSurviveARestart(t *testing.T) {
	h := newHarness(t, 2, false)
	want := []WarnKind{WarnHourly80, WarnHourlyCap}
	hourlyBurst(t, h.c, t0, 10)
	if got := warnKinds(h.rec.get()); !reflect.DeepEqual(got, want) {
		t.Fatalf("first hour: %v, want %v", got, want)
	}
	h.restart()
	hourlyBurst(t, h.c, t0.Add(2*time.Hour), 10)
	h.restart()
	hourlyBurst(t, h.c, t0.Add(24*time.Hour-time.Minute), 10)
	if got := warnKinds(h.rec.get()); !reflect.DeepEqual(got, want) {
		t.Fatalf("within 24 hours, across restarts: %v, want only the first hour's %v", got, want)
	}
	h.restart()
	later := t0.Add(24 * time.Hour)
	hourlyBurst(t, h.c, later, 10)
	ws := h.rec.get()
	if got := warnKinds(ws); !reflect.DeepEqual(got, append(want, want...)) {
		t.Fatalf("24 hours on: %v, want both again", got)
	}
	if !ws[2].At.Equal(later) || ws[2].Used != 8 || ws[3].Used != 10 {
		t.Fatalf("24 hours on: %+v", ws[2:])
	}
	// The store holds the later times now.
	stored(t, h.c)
	_, tot, err := h.db.LoadUsage("a", storage.MonthOf(later))
	if err != nil {
		t.Fatal(err)
	}
	if tot.HourWarned != [2]int64{later.UnixNano(), later.UnixNano()} || tot.Evaluations != 40 {
		t.Fatalf("stored totals %+v", tot)
	}
}

// TestHourlyWarningsSurviveACrash: in the default durability mode a
// warning's time is as durable as the charge that sent it: after the
// group sync (the README's bound for counts), a crash (kill -9) keeps it,
// and the restarted service does not send it again within 24 hours.
func TestHourlyWarningsSurviveACrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := storage.Open("q", storage.Options{FS: fs, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	c := New(quietSystem().Root, Config{Shards: 1, Store: db, Notifier: rec})
	hourlyBurst(t, c, t0, 8)
	if got := warnKinds(rec.get()); !reflect.DeepEqual(got, []WarnKind{WarnHourly80}) {
		t.Fatalf("80%%: %v", got)
	}
	if err := db.Sync(); err != nil { // what the group sync does every SyncInterval
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	c.Stop()
	db.Close()

	db, err = storage.Open("q", storage.Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rec2 := &recorder{}
	c = New(quietSystem().Root, Config{Shards: 1, Store: db, Notifier: rec2})
	defer c.Stop()
	hourlyBurst(t, c, t0.Add(90*time.Minute), 10)
	// The cap was never reached before the crash: its warning is due.
	if got := warnKinds(rec2.get()); !reflect.DeepEqual(got, []WarnKind{WarnHourlyCap}) {
		t.Fatalf("after the crash: %v, want the cap's only", got)
	}
}

// TestHourlyWarningOnceAfterALostBatch: a charge answered ahead that sends
// an hourly warning, whose batch then fails, leaves the store without the
// warning's time until the account's next delta carries it (the sweep
// keeps the account meanwhile), and a restart then does not send the
// warning again.
func TestHourlyWarningOnceAfterALostBatch(t *testing.T) {
	s := newAheadStore(t)
	rec := &recorder{}
	c := New(quietSystem().Root, Config{Shards: 1, Store: s, Notifier: rec, IdleAfter: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	hourlyBurst(t, c, t0, 7)
	stored(t, c)
	s.fail.Store(true)
	hourlyBurst(t, c, t0, 1) // 8th: 80%, answered ahead, its batch fails
	stored(t, c)
	s.fail.Store(false)
	hourlyBurst(t, c, t0, 1) // 9th: stored, with the 8th's warning time
	stored(t, c)
	if _, tot, err := s.DB.LoadUsage("a", storage.MonthOf(t0)); err != nil || tot.HourWarned[0] != t0.UnixNano() {
		t.Fatalf("stored after the next delta: %+v %v; want the 80%% warning's time", tot, err)
	}
	// Within 24 hours of a warning the sweep keeps the account.
	c.Sweep(t0.Add(3 * time.Hour))
	if n := c.resident(); n != 1 {
		t.Fatalf("resident %d within 24 hours of a warning", n)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	c = New(quietSystem().Root, Config{Shards: 1, Store: s, Notifier: rec, IdleAfter: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	hourlyBurst(t, c, t0.Add(3*time.Hour), 10)
	if got := warnKinds(rec.get()); !reflect.DeepEqual(got, []WarnKind{WarnHourly80, WarnHourlyCap}) {
		t.Fatalf("warnings %v: 80%% once, the cap once", got)
	}
}
