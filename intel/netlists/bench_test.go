package netlists

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// benchAddrs returns a fixed mix of addresses: random IPv4 (mostly
// residential space, a real-traffic-like miss path), starts of IPv6 AS
// ranges, and known hits from the lists.
func benchAddrs(s *Snapshot) []netip.Addr {
	r := rand.New(rand.NewPCG(7, 7))
	var out []netip.Addr
	for i := 0; i < 3000; i++ {
		v := r.Uint32()
		out = append(out, netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}))
	}
	t6 := &s.asn.v6
	for i := 0; i < 1000 && t6.len() > 0; i++ {
		out = append(out, t6.start[r.IntN(t6.len())].Add(feedfile.U128{Lo: uint64(r.IntN(1000))}).Addr())
	}
	for _, a := range []string{"8.8.8.8", "1.178.1.1", "102.130.113.9", "104.28.28.1", "23.144.160.67", "2606:54c0::1"} {
		out = append(out, netip.MustParseAddr(a))
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func BenchmarkClassify(b *testing.B) {
	s := embeddedSnapshot(b)
	addrs := benchAddrs(s)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = s.Classify(addrs[i%len(addrs)])
	}
}

func BenchmarkBare(b *testing.B) {
	s := embeddedSnapshot(b)
	addrs := benchAddrs(s)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = s.Bare(addrs[i%len(addrs)])
	}
}

func BenchmarkDisposableEmail(b *testing.B) {
	s := embeddedSnapshot(b)
	in := []string{"someone@gmail.com", "x@Sub.Mailinator.com", "a.b.c.example.co.uk"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = s.DisposableEmail(in[i%len(in)])
	}
}

// BenchmarkLoadEmbedded measures a full load (decompress, decode, index) and
// reports the live heap the snapshot holds.
func BenchmarkLoadEmbedded(b *testing.B) {
	var keep *Snapshot
	for b.Loop() {
		s, err := LoadEmbedded()
		if err != nil {
			b.Fatal(err)
		}
		keep = s
	}
	b.StopTimer()
	keep = nil
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	keep, _ = LoadEmbedded()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MB")
	runtime.KeepAlive(keep)
}

// TestLoadBudget keeps the load well under a second and the heap to tens of
// megabytes; both have plenty of headroom, so a failure means a regression
// (a feed decoded twice, a map where a table should be), not noise.
func TestLoadBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	s, err := LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := after.HeapAlloc - before.HeapAlloc
	t.Logf("LoadEmbedded: %v, heap %.1f MB; process %s", took, float64(heap)/(1<<20), procMem())
	// The load time is logged, not asserted: speed is shown by
	// BenchmarkLoadEmbedded, never by a timed test (a busy machine took 6 s).
	if heap > 200<<20 {
		t.Errorf("snapshot holds %d MB of heap", heap>>20)
	}
	runtime.KeepAlive(s)
}

// procMem returns the process's resident and peak resident memory as Linux
// reports them, or "" elsewhere.
func procMem() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") || strings.HasPrefix(line, "VmHWM:") {
			out = append(out, strings.Join(strings.Fields(line), " "))
		}
	}
	return strings.Join(out, ", ")
}
