// Package accesstoken mints and verifies the OAuth 2.0 client-credentials
// access tokens of SPEC §5.4: HS256 JWTs (alg pinned, kid set) carrying the
// account id, the key type and the key generation they were minted from —
// never the key. Whether that generation still works is the caller's check.
package accesstoken

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/fraudd/fraudd/internal/secrets"
)

// Lifetime of an access token (SPEC §8).
const Lifetime = 3600 * time.Second

// Scope is the only scope tokens carry.
const Scope = "api"

const issuer = "fraudd"

// Claims is what a token says.
type Claims struct {
	Account    string
	Test       bool   // minted from the personal test key
	Generation uint32 // the key generation it is bound to
	IssuedAt   time.Time
	ExpiresAt  time.Time
	ID         string
}

// Issuer signs and verifies tokens with a key derived from the master secret.
type Issuer struct {
	key []byte
	kid string
}

// NewIssuer derives the signing key. The kid names the key (a hash prefix), so
// a change of master secret is visible in tokens without revealing anything.
func NewIssuer(m secrets.Master) *Issuer {
	k := m.Derive(secrets.LabelAccessToken)
	sum := sha256.Sum256(k)
	return &Issuer{key: k, kid: "hs256-" + hex.EncodeToString(sum[:6])}
}

type wireClaims struct {
	jwt.RegisteredClaims
	KeyType    string `json:"kt"`
	Generation uint32 `json:"gen"`
	Scope      string `json:"scope"`
}

// Mint signs a token for c; IssuedAt must be set, ExpiresAt defaults to
// IssuedAt + Lifetime.
func (i *Issuer) Mint(c Claims) (string, error) {
	if c.ExpiresAt.IsZero() {
		// exp is whole seconds: round up, so that a token minted at .9 s
		// still lives its full Lifetime.
		c.ExpiresAt = c.IssuedAt.Add(Lifetime + time.Second - 1).Truncate(time.Second)
	}
	kt := "live"
	if c.Test {
		kt = "test"
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, wireClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: issuer, Subject: c.Account, ID: c.ID,
			IssuedAt: jwt.NewNumericDate(c.IssuedAt), ExpiresAt: jwt.NewNumericDate(c.ExpiresAt),
		},
		KeyType: kt, Generation: c.Generation, Scope: Scope,
	})
	t.Header["kid"] = i.kid
	s, err := t.SignedString(i.key)
	if err != nil {
		return "", fmt.Errorf("sign access token: %w", err)
	}
	return s, nil
}

// ErrInvalid covers every token that does not verify: bad signature, wrong
// algorithm, expired, malformed.
var ErrInvalid = errors.New("invalid access token")

// ErrExpired is the ErrInvalid of a token that is this service's, as minted,
// and only past its expiry: SPEC §5.4's "mint a new token on a 401" case,
// which CLARIFICATIONS ("Auth") does not count as an invalid credential
// toward the lockout (a fleet sharing one token would lock its address
// out of minting the next). errors.Is(ErrExpired, ErrInvalid) holds.
var ErrExpired = fmt.Errorf("%w: expired", ErrInvalid)

// Verify checks the signature (HS256 only), the kid, the issuer and the
// expiry as of now (the service clock, so the test clock moves expiry too).
func (i *Issuer) Verify(token string, now time.Time) (Claims, error) {
	var wc wireClaims
	t, err := jwt.ParseWithClaims(token, &wc, func(t *jwt.Token) (any, error) {
		if kid, _ := t.Header["kid"].(string); kid != i.kid {
			return nil, errors.New("unknown kid")
		}
		return i.key, nil
	}, jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(issuer), jwt.WithExpirationRequired(),
		// One spelling per token: base64url's padding bits must be zero, so
		// a token reads only as minted (RFC 4648 3.5), never as a string
		// nobody was given.
		jwt.WithStrictDecoding(),
		jwt.WithTimeFunc(func() time.Time { return now }))
	wellFormed := wc.Subject != "" && wc.Scope == Scope && (wc.KeyType == "live" || wc.KeyType == "test")
	if err != nil && errors.Is(err, jwt.ErrTokenExpired) && wellFormed && wc.Issuer == issuer &&
		!errors.Is(err, jwt.ErrTokenSignatureInvalid) && !errors.Is(err, jwt.ErrTokenMalformed) && !errors.Is(err, jwt.ErrTokenUnverifiable) {
		// The parser checks the claims only once the signature verified:
		// this is a token of ours whose time is up.
		return Claims{}, fmt.Errorf("%w: %v", ErrExpired, err)
	}
	if err != nil || !t.Valid || !wellFormed {
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	c := Claims{Account: wc.Subject, Test: wc.KeyType == "test", Generation: wc.Generation, ID: wc.ID}
	if wc.IssuedAt != nil {
		c.IssuedAt = wc.IssuedAt.Time
	}
	c.ExpiresAt = wc.ExpiresAt.Time
	return c, nil
}

// LooksLikeJWT tells a compact JWS ("header.payload.signature", base64url)
// from an API key without parsing it.
func LooksLikeJWT(s string) bool {
	return strings.HasPrefix(s, "eyJ") && strings.Count(s, ".") == 2
}
