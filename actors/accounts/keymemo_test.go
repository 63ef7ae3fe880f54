package accounts

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/clock"
)

func memoLen(s *Service) int { return s.keys.len() }

// TestKeyMemoRemembersResolvedKeysOnly: a key is remembered once it
// resolved, under its own HMAC; keys that resolve to nothing never are.
func TestKeyMemoRemembersResolvedKeysOnly(t *testing.T) {
	clk := clock.NewOffset()
	s, _ := start(t, vfs.NewMem(), clk)
	c, err := s.Create(NewAccount{Email: "a@b.co", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, ok := s.Authenticate(fmt.Sprintf("sk_live_guess%d", i), clk.Now()); ok {
			t.Fatal("a guessed key authenticated")
		}
		if s.ByPublishableKey(fmt.Sprintf("pk_guess%d", i)) != nil {
			t.Fatal("a guessed publishable key resolved")
		}
	}
	if n := memoLen(s); n != 0 {
		t.Fatalf("memo holds %d keys after only failed lookups", n)
	}
	for range 3 {
		if a, ok := s.Authenticate(c.LiveKey, clk.Now()); !ok || a.Kind != KeyLive {
			t.Fatalf("live key: %+v %v", a, ok)
		}
		if v := s.ByPublishableKey(c.PublishableKey); v == nil || v.ID != c.View.ID {
			t.Fatal("publishable key")
		}
	}
	if n := memoLen(s); n != 2 {
		t.Fatalf("memo holds %d keys, want the live and the publishable key", n)
	}
	for _, k := range []string{c.LiveKey, c.PublishableKey} {
		h, ok, _ := s.keys.get(k)
		if !ok || h != s.HashKey(k) {
			t.Fatalf("memo entry of %s is not its HMAC", k[:8])
		}
	}
}

// TestKeyMemoRotatedKeyStopsWorking: a key remembered before its rotation is
// refused after it, at once, and the memo no longer holds it.
func TestKeyMemoRotatedKeyStopsWorking(t *testing.T) {
	clk := clock.NewOffset()
	s, _ := start(t, vfs.NewMem(), clk)
	c, err := s.Create(NewAccount{Email: "a@b.co", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second is a memo hit
		if _, ok := s.Authenticate(c.TestKey, clk.Now()); !ok {
			t.Fatal("test key")
		}
	}
	if _, ok, _ := s.keys.get(c.TestKey); !ok {
		t.Fatal("the test key was not remembered")
	}
	test2, err := s.RotateTest(c.View.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.keys.get(c.TestKey); ok {
		t.Fatal("the rotated key is still remembered")
	}
	if _, ok := s.Authenticate(c.TestKey, clk.Now()); ok {
		t.Fatal("the rotated test key authenticated")
	}
	if a, ok := s.Authenticate(test2, clk.Now()); !ok || a.Kind != KeyTest {
		t.Fatalf("new test key: %+v %v", a, ok)
	}
	// Removing the account (a cluster install) forgets its keys too.
	if err := s.Install(nil, []string{c.View.ID}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Authenticate(test2, clk.Now()); ok {
		t.Fatal("a removed account's key authenticated")
	}
	if n := memoLen(s); n != 0 {
		t.Fatalf("memo holds %d keys after the account went", n)
	}
}

// TestKeyMemoRememberAfterChangeIsDropped: a key hashed and resolved while a
// binding changed is not remembered (it may be the key that was revoked).
func TestKeyMemoRememberAfterChangeIsDropped(t *testing.T) {
	var m keyMemo
	_, ok, gen := m.get("k1")
	if ok {
		t.Fatal("empty memo hit")
	}
	m.forget() // a binding changed meanwhile
	m.remember(gen, "k1", [32]byte{1})
	if _, ok, _ := m.get("k1"); ok {
		t.Fatal("a key resolved across a change was remembered")
	}
	_, _, gen = m.get("k1")
	m.remember(gen, "k1", [32]byte{1})
	if h, ok, _ := m.get("k1"); !ok || h != [32]byte{1} {
		t.Fatal("a key resolved with no change in between was not remembered")
	}
}

// TestKeyMemoIsBounded: past keyMemoCap keys nothing more is remembered.
func TestKeyMemoIsBounded(t *testing.T) {
	var m keyMemo
	for i := range keyMemoCap + 10 {
		_, _, gen := m.get("")
		m.remember(gen, fmt.Sprint(i), [32]byte{})
	}
	if n := m.len(); n != keyMemoCap {
		t.Fatalf("memo holds %d keys, cap %d", n, keyMemoCap)
	}
}

// busyKey starts a service with one account and returns it with the
// account's live key and a time to authenticate at.
func busyKey(b *testing.B) (*Service, string, time.Time) {
	clk := clock.NewOffset()
	s, db := start(b, vfs.NewMem(), clk)
	b.Cleanup(func() { s.Stop(); db.Close() })
	c, err := s.Create(NewAccount{Email: "a@b.co", Plan: "free"})
	if err != nil {
		b.Fatal(err)
	}
	return s, c.LiveKey, clk.Now()
}

// BenchmarkAuthenticate: a busy key's lookup (a memo hit after the first).
func BenchmarkAuthenticate(b *testing.B) {
	s, key, now := busyKey(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.Authenticate(key, now); !ok {
			b.Fatal("key")
		}
	}
}

// BenchmarkAuthenticateParallel: the same busy key on every core, where a
// memo read must not write a shared cache line.
func BenchmarkAuthenticateParallel(b *testing.B) {
	s, key, now := busyKey(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := s.Authenticate(key, now); !ok {
				b.Error("key")
				return
			}
		}
	})
}
