package accesstoken

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/fraudd/fraudd/internal/secrets"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func TestMintVerify(t *testing.T) {
	iss := NewIssuer(secrets.FromBytes([]byte("m")))
	tok, err := iss.Mint(Claims{Account: "acc_1", Generation: 3, IssuedAt: t0, ID: "j1"})
	if err != nil || !LooksLikeJWT(tok) {
		t.Fatalf("mint: %q %v", tok, err)
	}
	c, err := iss.Verify(tok, t0.Add(59*time.Minute))
	if err != nil || c.Account != "acc_1" || c.Test || c.Generation != 3 || !c.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("verify: %+v %v", c, err)
	}
	if _, err := iss.Verify(tok, t0.Add(61*time.Minute)); !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrExpired) {
		t.Fatalf("expired token: %v, want ErrExpired (an ErrInvalid)", err)
	}
	// Tampering with the payload breaks the signature: not merely expired,
	// even past the expiry.
	parts := strings.Split(tok, ".")
	parts[1] = parts[1][:len(parts[1])-2] + "AA"
	for _, at := range []time.Time{t0, t0.Add(2 * time.Hour)} {
		if _, err := iss.Verify(strings.Join(parts, "."), at); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrExpired) {
			t.Fatalf("tampered token at %v: %v", at, err)
		}
	}
	// Another master secret's tokens do not verify, and are never read as
	// only expired.
	other := NewIssuer(secrets.FromBytes([]byte("other")))
	for _, at := range []time.Time{t0, t0.Add(2 * time.Hour)} {
		if _, err := other.Verify(tok, at); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrExpired) {
			t.Fatalf("foreign token at %v: %v", at, err)
		}
	}
	// A token of ours with a claim we never mint is invalid, expired or not.
	odd := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "acc_1", "iss": "someone", "exp": t0.Add(time.Hour).Unix(), "kt": "live", "scope": "api"})
	odd.Header["kid"] = iss.kid
	if s, err := odd.SignedString(iss.key); err != nil {
		t.Fatal(err)
	} else if _, err := iss.Verify(s, t0.Add(2*time.Hour)); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrExpired) {
		t.Fatalf("another issuer's expired token: %v", err)
	}
	// alg "none" and other algorithms are refused.
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "acc_1", "iss": "fraudd", "exp": t0.Add(time.Hour).Unix(), "kt": "live", "scope": "api"})
	none.Header["kid"] = iss.kid
	s, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if _, err := iss.Verify(s, t0); !errors.Is(err, ErrInvalid) {
		t.Fatal("alg none accepted")
	}
	if LooksLikeJWT("sk_live_abc") {
		t.Fatal("an API key looks like a JWT")
	}
}

// FuzzVerify: any bearer credential that looks like a JWT reaches Verify
// from an unauthenticated request, so any string is read without panicking
// and only a token this issuer signed verifies. A minted token reads back as
// the claims it was minted with, and a token altered in one byte fails (the
// signature covers the header and claims as encoded, and strict decoding
// leaves base64 no slack in the signature's last character).
func FuzzVerify(f *testing.F) {
	iss := NewIssuer(secrets.FromBytes([]byte("fuzz")))
	good, err := iss.Mint(Claims{Account: "acc_1", Generation: 3, IssuedAt: t0, ID: "j1"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, "acc_1", "j1", uint32(3), false, int64(0), uint16(0), byte('x'))
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.", "acc_2", "", uint32(0), true, int64(-86400), uint16(40), byte('.'))
	f.Add("eyJ..", "a", "\x00", uint32(1<<31), false, int64(1<<40), uint16(7), byte(0))
	f.Fuzz(func(t *testing.T, token, account, id string, gen uint32, test bool, at int64, pos uint16, b byte) {
		if c, err := iss.Verify(token, t0); err == nil && (c.Account == "" || !c.ExpiresAt.After(t0)) {
			t.Fatalf("%q verified as %+v", token, c)
		}
		if account == "" || !utf8.ValidString(account) || !utf8.ValidString(id) {
			return // account ids and jtis are ours, non-empty UTF-8
		}
		// Issue times within a century of t0, in whole seconds as a JWT has them.
		issued := t0.Add(time.Duration(at%(100*365*86400)) * time.Second)
		want := Claims{Account: account, Test: test, Generation: gen, IssuedAt: issued, ExpiresAt: issued.Add(Lifetime), ID: id}
		tok, err := iss.Mint(want)
		if err != nil {
			t.Fatalf("mint %+v: %v", want, err)
		}
		got, err := iss.Verify(tok, issued)
		if err != nil || !sameClaims(got, want) {
			t.Fatalf("%+v minted as %q read back as %+v, %v", want, tok, got, err)
		}
		i := int(pos) % len(tok)
		if tok[i] == b {
			return
		}
		altered := tok[:i] + string(b) + tok[i+1:]
		if got, err := iss.Verify(altered, issued); err == nil {
			t.Fatalf("%q altered at %d to %q verified as %+v, minted as %+v", tok, i, altered, got, want)
		}
	})
}

func sameClaims(a, b Claims) bool {
	return a.Account == b.Account && a.Test == b.Test && a.Generation == b.Generation && a.ID == b.ID &&
		a.IssuedAt.Equal(b.IssuedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

// TestOneTokenOneSpelling: a token is read only in the spelling it was
// minted in. Base64url's last character of the 32-byte signature carries
// two padding bits; a decoder that ignores them reads four spellings of one
// token, so a token a client was told is revoked or logged could come back
// as a string nobody has seen (RFC 4648 3.5: canonical encoding).
func TestOneTokenOneSpelling(t *testing.T) {
	iss := NewIssuer(secrets.FromBytes([]byte("m")))
	tok, err := iss.Mint(Claims{Account: "acc_1", Generation: 3, IssuedAt: t0, ID: "j1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iss.Verify(tok, t0); err != nil {
		t.Fatalf("the minted spelling: %v", err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	others := 0
	for i := range alphabet {
		if i == last || i>>2 != last>>2 { // the same four data bits, other padding bits
			continue
		}
		others++
		alt := tok[:len(tok)-1] + alphabet[i:i+1]
		if _, err := iss.Verify(alt, t0); !errors.Is(err, ErrInvalid) {
			t.Errorf("the spelling %q of a minted token was read: %v", alt[len(alt)-4:], err)
		}
	}
	if others != 3 {
		t.Fatalf("%d other spellings tried, want 3", others)
	}
}

// TestLifetimeIsWhole: exp is whole seconds; a token minted at .9 s still
// verifies 3599.5 s later (SPEC §5.4: lifetime 3600 s), and not past 3601 s.
func TestLifetimeIsWhole(t *testing.T) {
	iss := NewIssuer(secrets.FromBytes([]byte("unit")))
	minted := time.Date(2026, 11, 1, 12, 0, 0, 900_000_000, time.UTC)
	tok, err := iss.Mint(Claims{Account: "acc_x", IssuedAt: minted, ID: "j"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iss.Verify(tok, minted.Add(Lifetime-500*time.Millisecond)); err != nil {
		t.Fatalf("refused within its lifetime: %v", err)
	}
	if _, err := iss.Verify(tok, minted.Add(Lifetime+time.Second)); err == nil {
		t.Fatal("accepted past its lifetime")
	}
}
