package netlists

import (
	"net/netip"
	"sync"
	"testing"
)

var (
	embOnce sync.Once
	emb     *Snapshot
	embErr  error
)

func embeddedSnapshot(t testing.TB) *Snapshot {
	t.Helper()
	embOnce.Do(func() { emb, embErr = LoadEmbedded() })
	if embErr != nil {
		t.Fatal(embErr)
	}
	return emb
}

func TestClassifyFacts(t *testing.T) {
	s := embeddedSnapshot(t)
	for _, a := range []string{"8.8.8.8", "73.0.0.1", "104.28.28.1", "2606:54c0::1", "1.178.1.1", "102.130.113.9", "2001:4860:4860::8888"} {
		t.Logf("%s: %+v", a, s.Classify(netip.MustParseAddr(a)))
	}
}
