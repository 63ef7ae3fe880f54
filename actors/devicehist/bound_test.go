package devicehist

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestMemoryBoundedUnderDistinctAccounts: an uncapped account checking
// distinct end-user accounts, devices and addresses does not hold every
// record for IdleAfter: past the default bounds the stored records go,
// least recently used first, and an evicted record is read back from the
// store on its next observation.
func TestMemoryBoundedUnderDistinctAccounts(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	c := newClient(t, Config{Shards: 4, Store: db})
	const n = 4 * DefaultMaxAccounts // one customer: one shard
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{81, byte(i >> 16), byte(i >> 8), byte(i)}) }
	for i := range n {
		observe(t, c, Observation{Customer: "acc_1", EventID: fmt.Sprintf("ev-%d", i), DeviceID: fmt.Sprintf("dev-%d", i),
			AccountID: fmt.Sprintf("user-%d", i), IP: addr(i), Now: t0.Add(time.Duration(i) * time.Millisecond)})
		if i%1000 == 999 {
			if err := db.Sync(); err != nil { // runs the flush hook
				t.Fatal(err)
			}
		}
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	held := c.resident()
	t.Logf("%d observations: %d records held", n, held)
	// Slack: the records of the last flush interval are not yet stored.
	if bound := DefaultMaxDevices + DefaultMaxAccounts + DefaultMaxAddresses + 3000; held > bound {
		t.Fatalf("%d records held after %d distinct observations within IdleAfter; bound %d", held, n, bound)
	}
	f := observe(t, c, Observation{Customer: "acc_1", EventID: "ev-again", DeviceID: "dev-0", AccountID: "user-0", IP: addr(0),
		Now: t0.Add(n * time.Millisecond)})
	if f.History.Visits != 2 {
		t.Fatalf("an evicted record was not read back: %+v", f.History)
	}
}
