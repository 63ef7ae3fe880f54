package challenge

import (
	"testing"
	"time"
)

// TestOneSamplePerEventAcrossRestart: SPEC's "one accepted GPU sample per
// verified event" held only in memory; after a restart a fresh challenge
// for the same (still young) event recorded a second sample once the
// device's cooldown had passed. The stored sample now names its event.
func TestOneSamplePerEventAcrossRestart(t *testing.T) {
	start := storedClients(t)
	c := start()
	if r := gpu(c, t, "e1", "d1", 0.5, t0); r.Status != StatusRecorded {
		t.Fatalf("record: %+v", r)
	}
	if r := gpu(c, t, "e1", "d1", 0.9, t0.Add(time.Minute)); r.Status != StatusNotSaved {
		t.Fatalf("the same event again, same process: %+v", r)
	}
	c.Stop()
	c = start()
	defer c.Stop()
	if r := gpu(c, t, "e1", "d1", 0.9, t0.Add(time.Minute)); r.Status == StatusRecorded {
		t.Fatalf("after a restart, event e1 recorded a second GPU sample: %+v", r)
	}
	// Another event of the device records, past the cooldown.
	if r := gpu(c, t, "e2", "d1", 0.9, t0.Add(2*time.Minute)); r.Status != StatusRecorded {
		t.Fatalf("a new event after the restart: %+v", r)
	}
}
