package secrets

import (
	"bytes"
	"testing"
)

func TestDeriveSeparatesPurposes(t *testing.T) {
	m := FromBytes([]byte("master"))
	if bytes.Equal(m.Derive("a"), m.Derive("b")) {
		t.Fatal("two labels derived the same key")
	}
	if !bytes.Equal(m.Derive("a"), FromBytes([]byte("master")).Derive("a")) {
		t.Fatal("derivation is not deterministic")
	}
}

func TestSealRoundTrip(t *testing.T) {
	s, err := NewSealer(FromBytes([]byte("m")), "x")
	if err != nil {
		t.Fatal(err)
	}
	sealed := s.Seal([]byte("whsec_abc"))
	got, err := s.Open(sealed)
	if err != nil || string(got) != "whsec_abc" {
		t.Fatalf("open: %q %v", got, err)
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := s.Open(sealed); err == nil {
		t.Fatal("tampered value opened")
	}
	other, _ := NewSealer(FromBytes([]byte("m")), "y")
	if _, err := other.Open(s.Seal([]byte("v"))); err == nil {
		t.Fatal("value opened under another purpose's key")
	}
}

func TestRandom62(t *testing.T) {
	a, b := Random62(32), Random62(32)
	if len(a) != 43 || len(b) != 43 || a == b {
		t.Fatalf("Random62: %q %q", a, b)
	}
	for _, c := range a {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			t.Fatalf("non-base62 char %q", c)
		}
	}
	if len(RandomHex(16)) != 32 {
		t.Fatal("RandomHex length")
	}
}

// TestLabelsPinned: a derivation label never changes (labels.go). Each value
// here is the label as first shipped; editing one must fail this test.
func TestLabelsPinned(t *testing.T) {
	for got, want := range map[string]string{
		LabelAPIKeyPepper:   "api-key-pepper",
		LabelWebhookSecret:  "webhook-secret",
		LabelAccessToken:    "oauth-access-token-hs256",
		LabelNetworkToken:   "network-token",
		LabelVisitorID:      "visitor-id",
		LabelDeviceEvidence: "device-evidence",
		LabelAccountHash:    "devicehist-account-hash",
		LabelAccountSeal:    "devicehist-account-id",
	} {
		if got != want {
			t.Errorf("label %q changed to %q: keys derived from it no longer match stored data", want, got)
		}
	}
	seen := map[string]bool{}
	for _, l := range []string{LabelAPIKeyPepper, LabelWebhookSecret, LabelAccessToken, LabelNetworkToken,
		LabelVisitorID, LabelDeviceEvidence, LabelAccountHash, LabelAccountSeal} {
		if seen[l] {
			t.Errorf("label %q serves two purposes", l)
		}
		seen[l] = true
	}
}
