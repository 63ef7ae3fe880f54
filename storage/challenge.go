package storage

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// GPUFeatures is the length of a device-evidence feature vector (SPEC 2.5).
const GPUFeatures = 128

// GPUSample is one device's latest accepted GPU feature vector (the
// device-evidence beta, actors/challenge). Device is a keyed hash of the
// visitor id; the visitor id itself and the features are only ever stored
// sealed.
//
// Key: prefixGPUSample + len(customer) + customer + 16-byte device hash.
// Value: version (2) + last accepted sample as 8-byte big-endian Unix seconds
// (in clear, so retention needs no key) + 12-byte nonce + AES-GCM ciphertext
// of (len-prefixed visitor id + 128 big-endian float32 bits + len-prefixed
// event id), with the record key as additional data: a value moved to
// another key does not open. Version 1 had no event id.
type GPUSample struct {
	Customer string
	Device   [16]byte
	Visitor  string
	Last     time.Time
	Features [GPUFeatures]float32
	// Event is the verified event the sample was accepted for (SPEC: one
	// accepted sample per event): kept so that a restart still knows it.
	Event string
}

const gpuSampleVersion = 2

// ErrSealed is returned for a sample that does not open under the key.
var ErrSealed = errors.New("gpu sample does not open")

func gpuSampleKey(customer string, device *[16]byte) []byte {
	k := make([]byte, 0, 2+len(customer)+16)
	k = append(k, prefixGPUSample)
	k = appendCustomer(k, customer)
	return append(k, device[:]...)
}

func gpuCustomerBounds(customer string) (lo, hi []byte) {
	lo = appendCustomer([]byte{prefixGPUSample}, customer)
	hi = append(append([]byte(nil), lo...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	return lo, hi
}

// SealGPUSample returns s's key and sealed value.
func SealGPUSample(aead cipher.AEAD, s *GPUSample) (key, val []byte, err error) {
	if err := validCustomer(s.Customer); err != nil {
		return nil, nil, err
	}
	if len(s.Visitor) > 255 || len(s.Event) > 255 {
		return nil, nil, fmt.Errorf("gpu sample: visitor id of %d bytes, event id of %d", len(s.Visitor), len(s.Event))
	}
	key = gpuSampleKey(s.Customer, &s.Device)
	plain := make([]byte, 0, 1+len(s.Visitor)+4*GPUFeatures)
	plain = append(plain, byte(len(s.Visitor)))
	plain = append(plain, s.Visitor...)
	for _, f := range s.Features {
		plain = binary.BigEndian.AppendUint32(plain, math.Float32bits(f))
	}
	plain = append(plain, byte(len(s.Event)))
	plain = append(plain, s.Event...)
	val = make([]byte, 0, 9+aead.NonceSize()+len(plain)+aead.Overhead())
	val = append(val, gpuSampleVersion)
	val = binary.BigEndian.AppendUint64(val, uint64(s.Last.Unix()))
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, err
	}
	val = append(val, nonce...)
	return key, aead.Seal(val, nonce, plain, key), nil
}

// OpenGPUSample decodes a value sealed under key.
func OpenGPUSample(aead cipher.AEAD, key, val []byte) (*GPUSample, error) {
	ns := aead.NonceSize()
	if len(key) < 2 || key[0] != prefixGPUSample || int(key[1])+2+16 != len(key) {
		return nil, fmt.Errorf("gpu sample key: %w", errCorrupt)
	}
	if len(val) < 9+ns || (val[0] != gpuSampleVersion && val[0] != 1) {
		return nil, fmt.Errorf("gpu sample: %w", errCorrupt)
	}
	plain, err := aead.Open(nil, val[9:9+ns], val[9+ns:], key)
	if err != nil {
		return nil, ErrSealed
	}
	if len(plain) < 1 {
		return nil, fmt.Errorf("gpu sample body: %w", errCorrupt)
	}
	body := 1 + int(plain[0]) + 4*GPUFeatures // visitor and features
	event := ""
	switch {
	case val[0] == 1 && len(plain) == body:
	case val[0] == gpuSampleVersion && len(plain) > body && len(plain) == body+1+int(plain[body]):
		event = string(plain[body+1:])
	default:
		return nil, fmt.Errorf("gpu sample body: %w", errCorrupt)
	}
	// Lengths are bytes: widen them before adding, or a 255-byte visitor
	// (or a 254-byte customer) wraps around to an empty slice bound.
	nc, nv := int(key[1]), int(plain[0])
	s := &GPUSample{
		Customer: string(key[2 : 2+nc]),
		Last:     time.Unix(int64(binary.BigEndian.Uint64(val[1:9])), 0).UTC(),
		Visitor:  string(plain[1 : 1+nv]),
	}
	copy(s.Device[:], key[2+nc:])
	s.Event = event
	p := plain[1+nv:]
	for i := range s.Features {
		s.Features[i] = math.Float32frombits(binary.BigEndian.Uint32(p[4*i:]))
	}
	return s, nil
}

// PutGPUSample stores a sample write-behind (durable within the sync
// interval); nobody waits on it.
func (d *DB) PutGPUSample(aead cipher.AEAD, s *GPUSample) error {
	k, v, err := SealGPUSample(aead, s)
	if err != nil {
		return err
	}
	b := d.newBatch()
	_ = b.Set(k, v, nil)
	return d.commitBehind(b)
}

// LoadGPUSamples returns the customer's samples accepted after notBefore and
// deletes older ones and ones that no longer open (a changed key).
func (d *DB) LoadGPUSamples(aead cipher.AEAD, customer string, notBefore time.Time) ([]GPUSample, error) {
	lo, hi := gpuCustomerBounds(customer)
	it, err := d.newIter(lo, hi)
	if err != nil {
		return nil, err
	}
	var out []GPUSample
	var stale [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			break
		}
		s, err := OpenGPUSample(aead, it.Key(), v)
		if err != nil || s.Last.Before(notBefore) {
			stale = append(stale, append([]byte(nil), it.Key()...))
			continue
		}
		out = append(out, *s)
	}
	err = it.Err("iterate gpu samples")
	it.Close()
	if err != nil {
		return nil, err
	}
	if len(stale) > 0 {
		b := d.newBatch()
		for _, k := range stale {
			_ = b.Delete(k, nil)
		}
		if err := d.commitBehind(b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DeleteGPUSample deletes one device's sample (evicted past retention).
func (d *DB) DeleteGPUSample(customer string, device [16]byte) error {
	b := d.newBatch()
	_ = b.Delete(gpuSampleKey(customer, &device), nil)
	return d.commitBehind(b)
}

// PruneGPUSamples deletes the samples last accepted at or before before,
// of the customers mine accepts (nil: every customer). It reads only the
// clear time, so it needs no key: the samples of a customer who never comes
// back are dropped too.
func (d *DB) PruneGPUSamples(before time.Time, mine func(customer string) bool) error {
	it, err := d.newIter([]byte{prefixGPUSample}, []byte{prefixGPUSample + 1})
	if err != nil {
		return err
	}
	var stale [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < 2 || int(k[1])+2+16 != len(k) {
			continue
		}
		v, err := it.Value()
		if err != nil {
			break
		}
		if len(v) < 9 || time.Unix(int64(binary.BigEndian.Uint64(v[1:9])), 0).After(before) {
			continue
		}
		if mine != nil && !mine(string(k[2:2+int(k[1])])) {
			continue
		}
		stale = append(stale, append([]byte(nil), k...))
	}
	err = it.Err("iterate gpu samples")
	it.Close()
	if err != nil || len(stale) == 0 {
		return err
	}
	b := d.newBatch()
	for _, k := range stale {
		_ = b.Delete(k, nil)
	}
	return d.commitBehind(b)
}

// DeleteGPUSamples deletes every sample of the customer (the beta was
// disabled), durably.
func (d *DB) DeleteGPUSamples(customer string) error {
	lo, hi := gpuCustomerBounds(customer)
	b := d.newBatch()
	_ = b.DeleteRange(lo, hi, nil)
	return d.commit(b)
}
