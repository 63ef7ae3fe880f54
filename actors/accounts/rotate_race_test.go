package accounts

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/clock"
)

// TestRotationNeverRefusesTheRotatedKey: the live key being rotated works
// before the rotation (current) and after it (in grace), so a request that
// presents it while the rotation is published must authenticate too; a
// refusal there is a 401 (counted toward the caller's lockout) for a key
// that never stopped being valid.
func TestRotationNeverRefusesTheRotatedKey(t *testing.T) {
	clk := clock.NewOffset()
	s, db := start(t, vfs.NewMem(), clk)
	defer func() { s.Stop(); db.Close() }()
	c, err := s.Create(NewAccount{Email: "a@b.co", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	key := c.LiveKey
	var refused atomic.Int64
	for range 300 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func(key string) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, ok := s.Authenticate(key, clk.Now()); !ok {
					refused.Add(1)
				}
			}
		}(key)
		rot, err := s.RotateLive(c.View.ID)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		key = rot.Key
	}
	if n := refused.Load(); n > 0 {
		t.Fatalf("a live key was refused %d times while it was being rotated into its grace", n)
	}
}
