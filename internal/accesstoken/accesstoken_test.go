package accesstoken

import (
	"errors"
	"strings"
	"testing"
	"time"

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
	if _, err := iss.Verify(tok, t0.Add(61*time.Minute)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("expired token verified: %v", err)
	}
	// Tampering with the payload breaks the signature.
	parts := strings.Split(tok, ".")
	parts[1] = parts[1][:len(parts[1])-2] + "AA"
	if _, err := iss.Verify(strings.Join(parts, "."), t0); !errors.Is(err, ErrInvalid) {
		t.Fatal("tampered token verified")
	}
	// Another master secret's tokens do not verify.
	other := NewIssuer(secrets.FromBytes([]byte("other")))
	if _, err := other.Verify(tok, t0); !errors.Is(err, ErrInvalid) {
		t.Fatal("foreign token verified")
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
