package iplimit

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

var (
	v4  = netip.MustParseAddr("203.0.113.9")
	v6a = netip.MustParseAddr("2001:db8:1:2::1")
)

func v6n(i int) netip.Addr {
	b := v6a.As16()
	b[14], b[15] = byte(i>>8), byte(i)
	return netip.AddrFrom16(b)
}

func TestRulesFitProbeBuffer(t *testing.T) {
	n := 0
	for _, r := range Rules {
		if r.Name == "" || len(r.Windows) == 0 {
			t.Fatalf("incomplete rule %+v", r)
		}
		if r.LockFor == 0 {
			n += 2 * len(r.Windows)
		}
	}
	if n > maxProbes {
		t.Fatalf("taking every limiter needs %d probes", n)
	}
}

// TestEveryWindow walks each limiter's windows for IPv4 and an IPv6 address:
// exactly the figure passes, the next is refused until the window ends.
func TestEveryWindow(t *testing.T) {
	for kind := Protect; kind < NumKinds; kind++ {
		if Rules[kind].LockFor > 0 {
			continue // a lockout: Fail fills it (TestLockoutsApart)
		}
		for _, addr := range []netip.Addr{v4, v6a} {
			t.Run(fmt.Sprintf("%s/%s", kind, addr), func(t *testing.T) {
				l := newLimiter(0, false)
				now := t0
				for wi, w := range Rules[kind].Windows {
					// Use up what is left of this window (earlier, shorter windows
					// reset as time moves on; their counts add up here).
					for {
						v := l.take(Of(kind), addr, now)
						if !v.Allowed {
							break
						}
						now = now.Add(w.Len / time.Duration(2*w.PerAddr+1))
						if wi > 0 && now.Sub(t0) >= w.Len {
							t.Fatalf("window %d never refused", wi)
						}
					}
					v := l.take(Of(kind), addr, now)
					if v.Allowed || v.Kind != kind || v.RetryAfter < 1 {
						t.Fatalf("window %d: %+v", wi, v)
					}
					// The last window to refuse sets Retry-After; after it the take passes.
					now = now.Add(time.Duration(v.RetryAfter) * time.Second)
					if v := l.take(Of(kind), addr, now); !v.Allowed {
						t.Fatalf("window %d after Retry-After: %+v", wi, v)
					}
				}
			})
		}
	}
}

// TestLockoutsApart: the operator's lockout (AdminFail) and the API keys'
// (AuthFail) count and lock apart: twenty bad API keys from an address do
// not refuse its operator token, nor twenty wrong operator tokens its keys.
func TestLockoutsApart(t *testing.T) {
	for _, c := range []struct{ fail, other Kind }{{AuthFail, AdminFail}, {AdminFail, AuthFail}} {
		l := newLimiter(0, false)
		for i := 0; i < 20; i++ {
			l.fail(c.fail, v4, t0)
		}
		if v := l.take(Of(c.fail), v4, t0); v.Allowed || v.Kind != c.fail {
			t.Errorf("%s after 20 fails: %+v", c.fail, v)
		}
		if v := l.take(Of(c.other), v4, t0); !v.Allowed {
			t.Errorf("%s refused after 20 fails of %s: %+v", c.other, c.fail, v)
		}
		if v := l.take(Of(c.fail), v4, t0.Add(15*time.Minute)); !v.Allowed {
			t.Errorf("%s still locked after 15 minutes: %+v", c.fail, v)
		}
	}
}

func TestLookupFreeFigures(t *testing.T) {
	l := newLimiter(0, false)
	ok := 0
	for i := 0; i < 20; i++ {
		if l.take(Of(LookupFree), v4, t0.Add(time.Duration(i)*time.Second)).Allowed {
			ok++
		}
	}
	if ok != 12 {
		t.Fatalf("per minute: %d", ok)
	}
	// 80 a day: over many minutes only 80 in all get through.
	now := t0
	ok = 0
	for m := 0; m < 10; m++ {
		now = t0.Add(time.Duration(m+1) * time.Minute)
		for i := 0; i < 12; i++ {
			if l.take(Of(LookupFree), v4, now).Allowed {
				ok++
			}
		}
	}
	if ok != 80-12 {
		t.Fatalf("per day: %d more after the first minute", ok)
	}
	v := l.take(Of(LookupFree), v4, now)
	if v.Allowed || v.RetryAfter != int64((24*time.Hour-10*time.Minute)/time.Second) {
		t.Fatalf("day refusal: %+v", v)
	}
	// Invalid input has its own limit and leaves LookupFree alone.
	for i := 0; i < 60; i++ {
		if !l.take(Of(LookupFreeInvalid), v6a, t0).Allowed {
			t.Fatalf("invalid %d refused", i)
		}
	}
	if l.take(Of(LookupFreeInvalid), v6a, t0).Allowed {
		t.Fatal("61st invalid allowed")
	}
	if !l.take(Of(LookupFree), v6a, t0).Allowed {
		t.Fatal("invalid input counted toward lookup_free")
	}
}

func TestIPv6PrefixShared(t *testing.T) {
	l := newLimiter(0, false)
	// Six addresses of one /64 use 12 each: the /64's 72 is reached.
	for a := 0; a < 6; a++ {
		for i := 0; i < 12; i++ {
			if !l.take(Of(LookupFree), v6n(a), t0).Allowed {
				t.Fatalf("addr %d req %d refused", a, i)
			}
		}
		if l.take(Of(LookupFree), v6n(a), t0).Allowed {
			t.Fatalf("addr %d: 13th allowed", a)
		}
	}
	v := l.take(Of(LookupFree), v6n(7), t0.Add(time.Second))
	if v.Allowed || v.RetryAfter != 59 {
		t.Fatalf("7th address of a full /64: %+v", v)
	}
	// Another /64 is untouched; IPv4 has no /64.
	other := netip.MustParseAddr("2001:db8:1:3::1")
	if !l.take(Of(LookupFree), other, t0).Allowed {
		t.Fatal("other /64 refused")
	}
	// Bulk: 3 per address, 12 per /64.
	n := 0
	for a := 0; a < 10; a++ {
		for i := 0; i < 4; i++ {
			if l.take(Of(LookupBulk), v6n(a), t0).Allowed {
				n++
			}
		}
	}
	if n != 12 {
		t.Fatalf("bulk over one /64: %d", n)
	}
	// IPv4-mapped IPv6 is the IPv4 address.
	m := netip.MustParseAddr("::ffff:203.0.113.9")
	for i := 0; i < 3; i++ {
		l.take(Of(LookupBulk), m, t0)
	}
	if l.take(Of(LookupBulk), v4, t0).Allowed {
		t.Fatal("mapped address counted apart from its IPv4 form")
	}
}

func TestLockout(t *testing.T) {
	l := newLimiter(0, false)
	now := t0
	for i := 0; i < 19; i++ {
		if l.fail(AuthFail, v4, now) {
			t.Fatalf("locked after %d failures", i+1)
		}
		now = now.Add(time.Second)
	}
	if v := l.take(Of(AuthFail, Protect), v4, now); !v.Allowed {
		t.Fatalf("locked early: %+v", v)
	}
	if !l.fail(AuthFail, v4, now) {
		t.Fatal("20th failure did not lock")
	}
	v := l.take(Of(AuthFail, Protect), v4, now)
	if v.Allowed || v.Kind != AuthFail || v.RetryAfter != 900 {
		t.Fatalf("lockout: %+v", v)
	}
	if v := l.take(Of(AuthFail), v4, now.Add(15*time.Minute-time.Second)); v.Allowed || v.RetryAfter != 1 {
		t.Fatalf("near the end: %+v", v)
	}
	if v := l.take(Of(AuthFail), v4, now.Add(15*time.Minute)); !v.Allowed {
		t.Fatalf("after 15 min: %+v", v)
	}
	// Protect was counted once (the take before the lock), not during it.
	k, _, _ := addrKeys(v4)
	k.kind = Protect
	if s, _ := l.t.Get(k); s.n != 1 {
		t.Fatalf("protect count %d", s.n)
	}
	// Failures spread over more than one 15-minute window never lock.
	l2 := newLimiter(0, false)
	for i := 0; i < 19; i++ {
		l2.fail(AuthFail, v6a, t0)
	}
	if l2.fail(AuthFail, v6a, t0.Add(15*time.Minute)) {
		t.Fatal("locked across windows")
	}
	if !l2.take(Of(AuthFail), v6n(99), t0).Allowed {
		t.Fatal("lockout spread to the /64")
	}
}

func TestAllOrNothing(t *testing.T) {
	l := newLimiter(0, false)
	for i := 0; i < 30; i++ {
		l.take(Of(Sample), v4, t0)
	}
	if v := l.take(Of(Usage, Sample), v4, t0); v.Allowed || v.Kind != Sample {
		t.Fatalf("%+v", v)
	}
	k, _, _ := addrKeys(v4)
	k.kind = Usage
	if _, ok := l.t.Get(k); ok {
		t.Fatal("refused take counted toward another limiter")
	}
}

// TestMemoryBoundedAfterSweep: many distinct addresses fill the table; once
// their windows end a sweep empties it and gives the memory back.
func TestMemoryBoundedAfterSweep(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	l := newLimiter(0, false)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	for i := 0; i < n; i++ {
		a := netip.AddrFrom4([4]byte{byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
		if !l.take(Of(Protect), a, t0.Add(time.Duration(i)*time.Microsecond)).Allowed {
			t.Fatal("refused")
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	full := ms.HeapAlloc - base
	if got := l.sweep(t0.Add(30 * time.Minute)); got != 0 || l.t.Len() != n {
		t.Fatalf("swept %d live windows", got)
	}
	if got := l.sweep(t0.Add(2 * time.Hour)); got != n || l.t.Len() != 0 {
		t.Fatalf("swept %d of %d", got, n)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	after := int64(ms.HeapAlloc) - int64(base)
	t.Logf("%d addresses: %.1f MiB live, %.1f MiB after sweep", n, float64(full)/(1<<20), float64(after)/(1<<20))
	if after > int64(full)/10 {
		t.Fatalf("memory not returned: %d bytes before sweep, %d after", full, after)
	}
	runtime.KeepAlive(l)
}

// TestBoundedUnderAddressSweep: a stream of distinct addresses within one
// window cannot grow a bounded table past its bound, and a heavy hitter keeps
// its count while one-off addresses are dropped.
func TestBoundedUnderAddressSweep(t *testing.T) {
	l := newLimiter(10_000, false)
	heavy := netip.MustParseAddr("198.51.100.1")
	for i := 0; i < 100; i++ {
		l.take(Of(Protect), heavy, t0)
	}
	l.fail(AuthFail, v4, t0)
	for i := 0; i < 19; i++ {
		l.fail(AuthFail, v4, t0)
	}
	for i := 0; i < 200_000; i++ {
		a := v6n(0).As16()
		a[6], a[7], a[13], a[14], a[15] = byte(i>>16), byte(i>>8), byte(i), byte(i>>8), byte(i>>16)
		l.take(Of(Protect), netip.AddrFrom16(a), t0.Add(time.Duration(i)*time.Millisecond))
		if l.t.Len() > 10_000 {
			t.Fatalf("table grew to %d", l.t.Len())
		}
	}
	k, _, _ := addrKeys(heavy)
	k.kind = Protect
	if s, ok := l.t.Get(k); !ok || s.n != 100 {
		t.Fatalf("heavy hitter lost its count: %+v %v", s, ok)
	}
	if v := l.take(Of(AuthFail), v4, t0.Add(time.Minute)); v.Allowed {
		t.Fatal("a running lockout was dropped")
	}
	if l.relieved == 0 {
		t.Fatal("nothing relieved")
	}
}

func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
}

func TestClient(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 4})
	defer c.Stop()
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				v, err := c.Take(Of(Sample), v6a, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if v.Allowed {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 30 {
		t.Fatalf("admitted %d, want 30", ok.Load())
	}
	for i := 0; i < 20; i++ {
		c.Fail(AuthFail, v4, t0)
	}
	if v, err := c.Check(v4, t0); err != nil || v.Allowed || v.RetryAfter != 900 {
		t.Fatalf("check: %+v %v", v, err)
	}
	for i := 0; i < 5000; i++ {
		c.Take(Of(Protect), netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), t0)
	}
	if n := c.entries(); n != 5000+1+1 {
		t.Fatalf("entries %d", n)
	}
	c.Sweep(t0.Add(2 * time.Hour))
	if n := c.entries(); n != 0 {
		t.Fatalf("entries after sweep %d", n)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Take(Of(Sample), v4, t0); err != ErrStopped {
		t.Fatalf("after stop: %v", err)
	}
}

// BenchmarkTake measures one combined Take hop (lockout check + protect).
func BenchmarkTake(b *testing.B) {
	c := New(quietSystem().Root, Config{Shards: 4})
	defer c.Stop()
	addrs := make([]netip.Addr, 4096)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if v, err := c.Take(Of(AuthFail, Protect), addrs[i&4095], t0); err != nil || !v.Allowed {
			b.Fatal(v, err)
		}
	}
}

// BenchmarkLimiterTake is one shard's Take for an authenticated call
// (lockout check + protect) over 64k addresses, so that the table's
// lookups miss the cache as they do under many clients.
func BenchmarkLimiterTake(b *testing.B) {
	l := newLimiter(0, false)
	addrs := make([]netip.Addr, 1<<16)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{198, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	for _, a := range addrs {
		l.take(Of(AuthFail, Protect), a, t0)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if v := l.take(Of(AuthFail, Protect), addrs[i&(1<<16-1)], t0); !v.Allowed {
			b.Fatal(v)
		}
		i += 7919 // a prime stride: no two neighbours in a row
	}
}

func TestTakeAllocs(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	c.Take(Of(AuthFail, Protect), v6a, t0)
	if n := testing.AllocsPerRun(2000, func() { c.Take(Of(AuthFail, Protect), v6a, t0) }); n > 1 {
		t.Fatalf("%.1f allocations per take, want ≤ 1", n)
	}
}

// TestLockoutPer64: a guesser rotating through the addresses of one IPv6 /64
// is locked out after the /64's 120 invalid credentials in 15 minutes (six
// times one address's 20, so that one host's bad keys do not lock out its
// LAN); its neighbours in other /64s are not.
func TestLockoutPer64(t *testing.T) {
	per64 := Rules[AuthFail].Windows[0].Per64
	if per64 != 120 {
		t.Fatalf("the /64's figure is %d", per64)
	}
	l := newLimiter(0, false)
	for i := 0; i < int(per64)-1; i++ {
		if l.fail(AuthFail, v6n(i), t0) {
			t.Fatalf("locked after %d failures", i+1)
		}
	}
	if !l.take(Of(AuthFail), v6n(500), t0).Allowed {
		t.Fatal("locked before the 120th failure")
	}
	if !l.fail(AuthFail, v6n(int(per64)-1), t0) {
		t.Fatal("120th failure from one /64 did not lock it")
	}
	if v := l.take(Of(AuthFail, Protect), v6n(1000), t0); v.Allowed || v.Kind != AuthFail || v.RetryAfter != 900 {
		t.Fatalf("a fresh address of the locked /64: %+v", v)
	}
	other := netip.MustParseAddr("2001:db8:1:3::1")
	if !l.take(Of(AuthFail), other, t0).Allowed {
		t.Fatal("the lock spread to another /64")
	}
	if !l.take(Of(AuthFail), v6n(1000), t0.Add(15*time.Minute)).Allowed {
		t.Fatal("still locked after 15 minutes")
	}

	// The same through the shard actors.
	c := New(quietSystem().Root, Config{Shards: 4})
	defer c.Stop()
	for i := 0; i < int(per64); i++ {
		c.Fail(AuthFail, v6n(i), t0)
	}
	if v, err := c.Check(v6n(777), t0); err != nil || v.Allowed || v.RetryAfter != 900 {
		t.Fatalf("client: %+v %v", v, err)
	}
}

// TestSweepKeepsPartialLockoutCounts: a sweep tick stamped a moment before a
// failure it is queued behind must not drop that failure's count; nor may a
// full table flush partial counts by filling up with cheap requests.
func TestSweepKeepsPartialLockoutCounts(t *testing.T) {
	l := newLimiter(0, false)
	for i := 0; i < 19; i++ {
		l.fail(AuthFail, v4, t0.Add(time.Millisecond))
	}
	l.sweep(t0) // stamped before the failures, handled after them
	if !l.fail(AuthFail, v4, t0.Add(2*time.Millisecond)) {
		t.Fatal("the sweep forgot 19 failures: the 20th did not lock")
	}

	// Failures handled out of their stamping order count in one window.
	l = newLimiter(0, false)
	l.fail(AuthFail, v4, t0.Add(time.Millisecond))
	for i := 0; i < 18; i++ {
		l.fail(AuthFail, v4, t0)
	}
	if !l.fail(AuthFail, v4, t0.Add(time.Millisecond)) {
		t.Fatal("failures stamped before the window's first one were lost")
	}

	// A table filled by twice-seen addresses relieves them, not the count.
	l = newLimiter(10_000, false)
	for i := 0; i < 10; i++ {
		l.fail(AuthFail, v4, t0)
	}
	for i := 0; i < 50_000; i++ {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		l.take(Of(Protect), a, t0)
		l.take(Of(Protect), a, t0)
	}
	if l.relieved == 0 {
		t.Fatal("nothing relieved")
	}
	for i := 0; i < 9; i++ {
		if l.fail(AuthFail, v4, t0.Add(time.Minute)) {
			t.Fatalf("locked after %d failures", 11+i)
		}
	}
	if !l.fail(AuthFail, v4, t0.Add(time.Minute)) {
		t.Fatal("relieving the full table dropped a partial lockout count")
	}

	// A count whose window has ended does go at the next sweep.
	l = newLimiter(0, false)
	l.fail(AuthFail, v4, t0)
	if n := l.sweep(t0.Add(15 * time.Minute)); n != 1 || l.t.Len() != 0 {
		t.Fatalf("ended window kept: swept %d, %d left", n, l.t.Len())
	}
}

// TestLockoutsKeepCountersRoom: lockouts spread over more addresses than
// the table holds (a guesser on many addresses, 20 invalid keys each) do
// not take the counters with them at every relieve: the newest lockouts
// hold, an address's own limit still refuses, and the table keeps its
// bound.
func TestLockoutsKeepCountersRoom(t *testing.T) {
	l := newLimiter(1000, false)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) }
	const guessers = 2000
	for i := range guessers {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		for range 20 {
			l.fail(AuthFail, addr(i), now)
		}
	}
	now := t0.Add(guessers * time.Millisecond)
	if v := l.take(Of(AuthFail, Sample), addr(guessers-1), now); v.Allowed || v.Kind != AuthFail {
		t.Fatalf("the newest lockout did not hold: %+v", v)
	}
	fresh := netip.MustParseAddr("198.51.100.1")
	n := 0
	for ; n < 100; n++ {
		if !l.take(Of(Sample), fresh, now).Allowed {
			break
		}
	}
	if n != 30 {
		t.Fatalf("an address's limit of 30 a minute admitted %d beside %d lockouts", n, l.locks.Len())
	}
	if h := l.held(); h > 1000 {
		t.Fatalf("%d counters and lockouts held; the bound is 1000", h)
	}
}

// TestDefaultBoundFitsMemoryBudget: the default bound, filled by distinct
// addresses (an IPv6 sweep of /api/lookup, each address holding its day's
// window), holds a share of the 300 MB RSS budget the feeds leave room for,
// not more than the whole budget (2,000,000 counters held about 200 MB).
func TestDefaultBoundFitsMemoryBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("fills the default bound")
	}
	n := actors.ShardCount(0)
	per := max(DefaultMaxEntries/n, 64)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ls := make([]*limiter, n)
	for i := range ls {
		ls[i] = newLimiter(per, false)
	}
	// Fill to nine tenths of the bound: the most the table holds just
	// before relief cuts it.
	held := 0
	for i := 0; held < DefaultMaxEntries*9/10; i++ {
		var b [16]byte
		b[0], b[1] = 0x2a, 0x01
		b[4], b[5], b[6], b[7] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		b[15] = 1
		a := netip.AddrFrom16(b)
		ls[shardHash(a)&uint64(n-1)].take(Of(LookupFree), a, t0.Add(time.Duration(i)*time.Microsecond))
		if i%1024 == 0 {
			held = 0
			for _, l := range ls {
				held += l.held()
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d counters held in %d shards: %.1f MiB", held, n, float64(grew)/(1<<20))
	if grew > 64<<20 {
		t.Fatalf("the full table holds %.0f MiB, more than 64 MiB of the 300 MB budget", float64(grew)/(1<<20))
	}
	runtime.KeepAlive(ls)
}
