package health

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// TestUnreadableHistoryStopsTheStart: a stored day the build cannot decode
// (a record version a newer build wrote, as version 2 is to the builds
// before it) stops New with the decoder's error. It was logged at WARN and
// the history started empty: /api/status showed no past day, and the start
// probe rewrote the day's record from zero over the one it could not read.
func TestUnreadableHistoryStopsTheStart(t *testing.T) {
	fs := vfs.NewMem()
	t0 := time.Date(2026, 11, 20, 1, 0, 0, 0, time.UTC)
	// A day of health record version 9 (no build writes it), yesterday.
	p, err := pebble.Open("d", &pebble.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	key := binary.BigEndian.AppendUint32([]byte{0x51}, uint32(t0.Unix()/86400-1))
	if err := p.Set(key, []byte{9, 10, 10, 10, 10, 10, 7}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open("d", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clk := clock.NewOffset()
	clk.Set(t0)
	m, err := New(quiet().Root, Config{DB: db, Clock: clk, Interval: time.Hour})
	if err == nil {
		m.Stop()
		t.Fatal("New started over a history it cannot read")
	}
	if !strings.Contains(err.Error(), "health version 9") {
		t.Fatalf("error does not name the record: %v", err)
	}
	// Nothing was written over the stored day.
	if _, err := db.Health(t0.AddDate(0, 0, -2)); err == nil || !strings.Contains(err.Error(), "health version 9") {
		t.Fatalf("stored day after the refused start: %v", err)
	}
}
