package storage

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzWALTail: the newest WAL's bytes (disk) are walked without a panic;
// replay stops inside the file, and an intact chunk reported after it is
// one (it checks out) that starts after the stop.
func FuzzWALTail(f *testing.F) {
	chunk := func(logNum uint32, typ byte, payload []byte) []byte {
		h := make([]byte, walRecyclableHdr, walRecyclableHdr+len(payload))
		binary.LittleEndian.PutUint16(h[4:], uint16(len(payload)))
		h[6] = typ
		binary.LittleEndian.PutUint32(h[7:], logNum)
		h = append(h, payload...)
		binary.LittleEndian.PutUint32(h[0:], walChecksum(h[6:]))
		return h
	}
	good := append(chunk(5, 5, []byte("first")), chunk(5, 5, []byte("second"))...)
	f.Add(good, uint32(5))
	bad := bytes.Clone(good)
	bad[13] ^= 1
	f.Add(bad, uint32(5))
	f.Add(append(chunk(5, 9, make([]byte, 8)), chunk(6, 5, nil)...), uint32(5))
	f.Fuzz(func(t *testing.T, b []byte, logNum uint32) {
		stop, intact := walTail(b, logNum)
		if stop < 0 || stop > len(b) {
			t.Fatalf("stop %d of %d", stop, len(b))
		}
		if intact >= 0 {
			if intact <= stop || intact >= len(b) {
				t.Fatalf("stop %d, intact %d of %d", stop, intact, len(b))
			}
			if _, ok, _ := walChunk(b, intact, logNum); !ok {
				t.Fatalf("intact %d does not check out", intact)
			}
		}
	})
}
