package webhook

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// TestSendTestSurvivesCrashWhenAnswered: SendTest returns (the operator's
// 202) only once the test event's pending record is synced, so a crash
// image taken at that moment (kill -9 right after the answer, before any
// group sync) resumes it. Written behind, it waited for the next group
// sync and a kill right after the 202 lost the event (README Webhooks:
// "its 202 comes once the event is stored as pending (so a restart
// resumes it …)").
func TestSendTestSurvivesCrashWhenAnswered(t *testing.T) {
	fs := vfs.NewCrashableMem()
	// An hour: the group sync never ticks during the test.
	f := newFixtureWith(t, Config{AllowPrivate: true}, storage.Options{FS: fs, SyncInterval: time.Hour})
	rcv := newReceiver(t, 503)
	f.dir.set("acc_c", rcv.URL+"/hook", "whsec_c")
	id, err := f.svc.SendTest("acc_c", f.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	img := fs.CrashClone(vfs.CrashCloneCfg{})
	db, err := storage.Open("d", storage.Options{FS: img})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got []string
	if err := db.PendingHooks(func(p *storage.PendingHook) error { got = append(got, p.Account+"/"+p.EventID+"/"+p.Event); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := "acc_c/" + id + "/" + KindTest; len(got) != 1 || got[0] != want {
		t.Fatalf("pending records in the crash image: %q, want [%s]", got, want)
	}
}
