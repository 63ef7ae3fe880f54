package storage

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// Records are encoded append-style (VictoriaMetrics' Marshal(dst) []byte habit):
// a version byte, then fields in a fixed order as uvarints, length-prefixed
// strings and fixed-size byte arrays. A new field is only ever appended at the
// end, with a new version byte, so old records keep decoding.

var errCorrupt = errors.New("corrupt record")

func appendUvarint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// appendTime stores Unix nanoseconds + 1 so that the zero time encodes as 0.
func appendTime(dst []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendUvarint(dst, 0)
	}
	return binary.AppendUvarint(dst, uint64(t.UnixNano())+1)
}

// appendOptInt stores nil as 0 and v as v+1 (v ≥ 0).
func appendOptInt(dst []byte, v *int64) []byte {
	if v == nil {
		return binary.AppendUvarint(dst, 0)
	}
	return binary.AppendUvarint(dst, uint64(*v)+1)
}

// reader decodes what the append helpers wrote; the first failure sticks.
type reader struct {
	b   []byte
	err error
}

// uvarintMax reads a uvarint of at most max: a larger one is corrupt, where
// narrowing it to its field would read another value (uses past 2³² as 0,
// an event never used).
func (r *reader) uvarintMax(max uint64) uint64 {
	v := r.uvarint()
	if v > max {
		r.err = errCorrupt
		return 0
	}
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte1() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.err = errCorrupt
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errCorrupt
		return nil
	}
	out := append([]byte(nil), r.b[:n]...)
	r.b = r.b[n:]
	return out
}

func (r *reader) string() string { return string(r.bytes()) }

// end marks bytes left after a record's last field as corrupt: a new field
// only ever comes with a new version byte, so they are damage (or a field
// of a build that broke that rule), which reading the record as far as its
// version goes would silently drop, and lose when it is rewritten.
func (r *reader) end() {
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
}

func (r *reader) bool() bool { return r.byte1() == 1 }

func (r *reader) time() time.Time {
	v := r.uvarint()
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(v-1)).UTC()
}

func (r *reader) optInt() *int64 {
	v := r.uvarint()
	if v == 0 || v-1 > math.MaxInt64 {
		return nil
	}
	x := int64(v - 1)
	return &x
}

func (r *reader) strings() []string {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		if r.err == nil {
			r.err = errCorrupt
		}
		return nil
	}
	out := make([]string, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		out = append(out, r.string())
	}
	return out
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ss)))
	for _, s := range ss {
		dst = appendString(dst, s)
	}
	return dst
}
