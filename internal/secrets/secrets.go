// Package secrets derives every key the service uses from one master secret and
// generates the random credentials it hands out (API keys, ids, webhook secrets).
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/big"
)

// Master is the server's master secret. Every derived key comes from it, so
// rotating it invalidates keys, tokens and sealed values alike.
type Master struct{ b [32]byte }

// FromBytes builds a Master from raw secret material of any length (a flag
// value or the contents of the data dir's master-secret file).
func FromBytes(b []byte) Master {
	return Master{b: sha256.Sum256(b)}
}

// Derive returns a 32-byte key for one purpose. Labels are fixed strings such
// as "api-key-pepper"; two purposes never share a key.
func (m Master) Derive(label string) []byte {
	h := hmac.New(sha256.New, m.b[:])
	h.Write([]byte("fraudd/v1/"))
	h.Write([]byte(label))
	return h.Sum(nil)
}

// Sealer encrypts small values at rest (webhook secrets, account ids) with
// AES-256-GCM under a derived key.
type Sealer struct{ aead cipher.AEAD }

// NewSealer returns a Sealer keyed for one purpose.
func NewSealer(m Master, label string) (*Sealer, error) {
	block, err := aes.NewCipher(m.Derive(label))
	if err != nil {
		return nil, fmt.Errorf("sealer cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("sealer gcm: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts plaintext; the nonce is prepended.
func (s *Sealer) Seal(plaintext []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // the OS RNG failing is not recoverable
	}
	return s.aead.Seal(nonce, nonce, plaintext, nil)
}

// Open decrypts what Seal produced.
func (s *Sealer) Open(sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed value too short")
	}
	out, err := s.aead.Open(nil, sealed[:n], sealed[n:], nil)
	if err != nil {
		return nil, fmt.Errorf("open sealed value: %w", err)
	}
	return out, nil
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Random62 returns n random bytes written in base62 (no padding), suitable for
// keys: 32 bytes give 43 characters.
func Random62(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	x := new(big.Int).SetBytes(b)
	// Fixed width so every key of a kind has the same length.
	width := (n*8*1000 + 5953) / 5954 // ceil(n*8 / log2(62))
	out := make([]byte, width)
	base := big.NewInt(62)
	mod := new(big.Int)
	for i := width - 1; i >= 0; i-- {
		x.DivMod(x, base, mod)
		out[i] = base62[mod.Int64()]
	}
	return string(out)
}

// RandomHex returns n random bytes as lowercase hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	const hexd = "0123456789abcdef"
	out := make([]byte, 2*n)
	for i, c := range b {
		out[2*i], out[2*i+1] = hexd[c>>4], hexd[c&15]
	}
	return string(out)
}

// KeyCheck returns a value that identifies this master secret without
// revealing it or any key derived for another purpose. The store keeps it, so
// a start with a lost or different secret can be refused.
func (m Master) KeyCheck() []byte { return m.Derive("key-check") }
