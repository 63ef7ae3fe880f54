package accounts

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// TestAcknowledgedChangesSurviveACrash: every account change is synced
// before the service answers, so a crash right after any answer (a clone of
// the disk keeping only what was synced, plus a random part of the rest)
// loses none of it: keys authenticate, plans, rules and pins are as set.
func TestAcknowledgedChangesSurviveACrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	clk := clock.NewOffset()
	s, db := start(t, mem, clk)
	defer func() { s.Stop(); db.Close() }()
	rng := rand.New(rand.NewPCG(42, 42))

	type want struct {
		live, prev, test, plan string
		rules                  []storage.Rule
		pins                   []storage.Pin
	}
	acked := map[string]*want{}
	crashAndCheck := func(step string) {
		t.Helper()
		clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng})
		s2, db2 := start(t, clone, clk)
		defer func() { s2.Stop(); db2.Close() }()
		for id, w := range acked {
			v := s2.Get(id)
			if v == nil {
				t.Fatalf("%s: account %s lost in the crash", step, id)
			}
			if v.Plan != w.plan || !slices.Equal(v.Rules, w.rules) || !slices.Equal(v.Pins, w.pins) {
				t.Fatalf("%s: account %s after the crash: plan %q rules %v pins %v, want %q %v %v", step, id, v.Plan, v.Rules, v.Pins, w.plan, w.rules, w.pins)
			}
			for _, key := range []string{w.live, w.prev, w.test} {
				if key == "" {
					continue
				}
				if a, ok := s2.Authenticate(key, clk.Now()); !ok || a.View.ID != id {
					t.Fatalf("%s: key %s… of %s does not authenticate after the crash", step, key[:12], id)
				}
			}
		}
	}

	for i := range 6 {
		c, err := s.Create(NewAccount{Email: fmt.Sprintf("crash%d@example.com", i), Plan: "free"})
		if err != nil {
			t.Fatal(err)
		}
		w := &want{live: c.LiveKey, test: c.TestKey, plan: "free"}
		acked[c.View.ID] = w
		crashAndCheck(fmt.Sprintf("create %d", i))

		rot, err := s.RotateLive(c.View.ID)
		if err != nil {
			t.Fatal(err)
		}
		w.prev, w.live = w.live, rot.Key
		plan := []string{"starter", "growth", "scale"}[i%3]
		if _, err := s.Update(c.View.ID, Patch{Plan: &plan}); err != nil {
			t.Fatal(err)
		}
		w.plan = plan
		w.rules = []storage.Rule{{Signal: "vpn", Action: "block"}, {Signal: "tor", Action: []string{"review", "block"}[i%2]}}
		if _, err := s.SetRules(c.View.ID, w.rules); err != nil {
			t.Fatal(err)
		}
		w.pins = []storage.Pin{{IP: fmt.Sprintf("203.0.113.%d/32", i+1), Action: "allow", Label: "office"}}
		if _, err := s.SetPins(c.View.ID, w.pins); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if w.test, err = s.RotateTest(c.View.ID); err != nil {
				t.Fatal(err)
			}
		}
		crashAndCheck(fmt.Sprintf("changes %d", i))
	}
}
