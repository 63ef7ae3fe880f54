package webhook

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/accounts"
)

// TestPendingDeliveryResumesAfterRestart: a retry pending when the service
// stops is stored, resumed by the next start on the same schedule (1 minute
// after the failed attempt, by the service clock), made once, and forgotten
// when it succeeds.
func TestPendingDeliveryResumesAfterRestart(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 503)
	f.dir.set("acc_r", rcv.URL+"/hook", "whsec_one")
	ev := threat("acc_r")
	ev.Details.RuleMatched = []string{"tor"}
	ev.Details.VPN, ev.Details.PrivacyRelay = true, true
	f.svc.Notify(ev)
	eventually(t, "attempt 1 logged", func() bool { return len(f.deliveries(t, "acc_r")) == 1 })
	p := f.pending(t)
	if len(p) != 1 || p[0].Attempts != 1 || !p[0].Due.Equal(t0.Add(time.Minute)) || p[0].Account != "acc_r" {
		t.Fatalf("stored pending: %+v", p)
	}

	f.restart(t)
	f.clk.Advance(59 * time.Second)
	settle()
	if n := len(rcv.got()); n != 1 {
		t.Fatalf("resumed retry made early: %d hits", n)
	}
	rcv.status.Store(200)
	f.clk.Advance(time.Second)
	eventually(t, "attempt 2 logged", func() bool { return len(f.deliveries(t, "acc_r")) == 2 })
	d := f.deliveries(t, "acc_r")[0]
	if d.Attempt != 2 || d.StatusCode != 200 || !d.NextAt.IsZero() {
		t.Fatalf("resumed attempt: %+v", d)
	}
	hits := rcv.got()
	if len(hits) != 2 || hits[1].id != hits[0].id || string(hits[1].body) != string(hits[0].body) {
		t.Fatalf("resumed attempt is not the same event: %d hits\n%s\n%s", len(hits), hits[0].body, hits[len(hits)-1].body)
	}
	if len(f.pending(t)) != 0 {
		t.Fatalf("delivered event still pending: %+v", f.pending(t))
	}
	f.clk.Advance(time.Hour)
	f.restart(t)
	settle()
	if n := len(rcv.got()); n != 2 {
		t.Fatalf("%d hits after the delivery ended", n)
	}
}

// TestQueuedEventResumesAfterRestart: an event queued but never attempted
// (its receiver accepted nothing yet) is stored at once and sent after a restart.
func TestQueuedEventResumesAfterRestart(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	// The record enqueue writes before the first attempt, left by a process
	// that stopped before it could make that attempt.
	e := &event{kind: KindThreat, id: NewEventID(), ev: threat("acc_q")}
	if err := f.db.PutPendingHook(pendingOf("acc_q", e)); err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t, 200)
	f.dir.set("acc_q", rcv.URL, "whsec_q")
	f.restart(t)
	eventually(t, "queued event sent", func() bool { return len(rcv.got()) == 1 })
	if h := rcv.got()[0]; h.id != e.id || !strings.Contains(string(h.body), `"threat_type":"Tor"`) {
		t.Fatalf("resumed event: %s %s", h.id, h.body)
	}
	eventually(t, "pending record deleted", func() bool { return len(f.pending(t)) == 0 })
}

// panicky is an account directory whose lookup of one account panics: an
// injected bug in the webhook shard's handler.
type panicky struct {
	*directory
	poison string
}

func (p panicky) Get(id string) *accounts.View {
	if id == p.poison {
		panic("injected panic for " + id)
	}
	return p.directory.Get(id)
}

// TestShardPanicReloadsPendingFromStore: a webhook shard that panics restarts
// from the store's pending events rather than from its memory; the event
// whose preparation panicked is dropped (not resumed into a crash loop); an
// attempt running across the restart reports to the new shard and is not
// made twice.
func TestShardPanicReloadsPendingFromStore(t *testing.T) {
	dir := &directory{views: map[string]*accounts.View{}, secret: map[string]string{}}
	f := newFixture(t, Config{AllowPrivate: true})
	// Three accounts on one shard.
	var names []string
	for i := 0; len(names) < 3; i++ {
		n := fmt.Sprintf("acc_%d", i)
		if actors.HashString(n)&1 == 0 {
			names = append(names, n)
		}
	}
	slowAcc, storedAcc, poison := names[0], names[1], names[2]
	f.cfg.Accounts = panicky{dir, poison}
	f.dir = dir
	f.restart(t)
	rcv := newReceiver(t, 200)
	dir.set(slowAcc, rcv.URL+"/slow", "whsec_s") // 300 ms: running across the crash
	dir.set(storedAcc, rcv.URL+"/stored", "whsec_t")

	f.svc.Notify(threat(slowAcc))
	eventually(t, "slow attempt started", func() bool { return len(rcv.got()) == 1 })
	// The store holds an event this shard's memory does not (as a previous
	// incarnation would have left it).
	e := &event{kind: KindThreat, id: NewEventID(), ev: threat(storedAcc)}
	if err := f.db.PutPendingHook(pendingOf(storedAcc, e)); err != nil {
		t.Fatal(err)
	}
	f.svc.Notify(threat(poison))
	eventually(t, "the stored event sent by the restarted shard", func() bool {
		for _, h := range rcv.got() {
			if h.id == e.id {
				return true
			}
		}
		return false
	})
	eventually(t, "the slow attempt logged", func() bool { return len(f.deliveries(t, slowAcc)) == 1 })
	eventually(t, "nothing left pending", func() bool { return len(f.pending(t)) == 0 })
	f.clk.Advance(time.Hour)
	settle()
	var slow int
	for _, h := range rcv.got() {
		if h.path == "/slow" {
			slow++
		}
	}
	if slow != 1 || len(rcv.got()) != 2 {
		t.Fatalf("%d slow attempts, %d hits: an attempt running across the restart was made again", slow, len(rcv.got()))
	}
	if d := f.deliveries(t, slowAcc); len(d) != 1 || d[0].StatusCode != 200 {
		t.Fatalf("slow delivery: %+v", d)
	}
}
