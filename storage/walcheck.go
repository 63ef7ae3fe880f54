package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Pebble replays its newest WAL up to the first chunk that does not check
// out and takes the rest for a write a crash interrupted, silently: it only
// calls the log corrupt when it finds an intact chunk in a later 32 KiB
// block. A flipped byte in the last block therefore drops every record after
// it without a word (found in v2.1.7, whose EventListener has no hook for
// it). An interrupted write leaves nothing intact behind it; corruption
// does. checkWALTail reads the WAL the way Pebble will and, when intact
// chunks follow the point where replay stops, refuses the start before
// Pebble replays the WAL (its open flushes what it replayed and deletes the
// WAL, so the records after the damage would be gone for good): a store
// that lost acknowledged writes is not one the service can vouch for. The
// operator restores a backup, or accepts the loss by cutting the WAL at
// the damage (truncate -s OFFSET FILE), which leaves a WAL as a crash
// leaves it: its end is where replay stops.
//
// The chunk format is the LevelDB log format with Pebble's log-number
// extension: 32 KiB blocks of chunks, each a header — masked CRC-32C (4
// bytes), payload length (2), chunk type (1), log number (4), and for the
// WAL-sync types a sync offset (8) — then the payload. The CRC covers the
// header from the type byte on and the payload. A chunk whose log number is
// one more than the file's is the end-of-file trailer of a clean close.

const (
	walBlockSize      = 32 << 10
	walRecyclableHdr  = 11
	walSyncHdr        = 19
	walMinHeaderBytes = 7
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

func walChecksum(b []byte) uint32 {
	c := crc32.Checksum(b, crc32c)
	return (c>>15 | c<<17) + 0xa282ead8
}

// walChunk checks the chunk at off: its size when it is intact and belongs
// to log logNum, trailer when it is the clean-close trailer.
func walChunk(b []byte, off int, logNum uint32) (size int, ok, trailer bool) {
	end := min((off/walBlockSize+1)*walBlockSize, len(b))
	if off+walRecyclableHdr > end {
		return 0, false, false
	}
	hdr := 0
	switch t := b[off+6]; {
	case t >= 5 && t <= 8:
		hdr = walRecyclableHdr
	case t >= 9 && t <= 12:
		hdr = walSyncHdr
	default:
		return 0, false, false
	}
	n := off + hdr + int(binary.LittleEndian.Uint16(b[off+4:]))
	if n > end {
		return 0, false, false
	}
	num := binary.LittleEndian.Uint32(b[off+7:])
	if num != logNum && num != logNum+1 {
		return 0, false, false
	}
	if walChecksum(b[off+6:n]) != binary.LittleEndian.Uint32(b[off:]) {
		return 0, false, false
	}
	return n - off, true, num == logNum+1
}

// walTail walks the chunks of a WAL as replay does. stop is where replay
// ends; intact is the offset of the first intact chunk after stop, or -1
// when nothing intact follows (a clean end, or an interrupted write).
func walTail(b []byte, logNum uint32) (stop, intact int) {
	off := 0
	for off < len(b) {
		blockEnd := min((off/walBlockSize+1)*walBlockSize, len(b))
		if blockEnd-off < walRecyclableHdr && allZero(b[off:blockEnd]) {
			off = blockEnd // the zero padding at the end of a block
			continue
		}
		if blockEnd-off < walSyncHdr && allZero(b[off:blockEnd]) {
			off = blockEnd
			continue
		}
		size, ok, trailer := walChunk(b, off, logNum)
		if !ok || trailer {
			break
		}
		off += size
	}
	stop = off
	if stop >= len(b) {
		return stop, -1
	}
	if _, ok, trailer := walChunk(b, stop, logNum); ok && trailer {
		return stop, -1
	}
	for o := stop + 1; o+walMinHeaderBytes <= len(b); o++ {
		if _, ok, _ := walChunk(b, o, logNum); ok {
			return stop, o
		}
	}
	return stop, -1
}

// walPage is the page size the kernel writes a file back in.
const walPage = 4096

// unwrittenPage reports whether the damage between stop and intact holds a
// whole page of zeros on a page boundary: a page written back after the
// ones around it and lost with the power, not a flipped bit.
func unwrittenPage(b []byte, stop, intact int) bool {
	for p := (stop + walPage - 1) / walPage * walPage; p+walPage <= intact; p += walPage {
		if allZero(b[p : p+walPage]) {
			return true
		}
	}
	return false
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// ErrWALCorrupt is returned (wrapped, naming the file and the offsets) by
// Open when the newest WAL has a corrupt record with intact records after
// it: replay would stop at the damage and drop them for good.
var ErrWALCorrupt = errors.New("the WAL has a corrupt record with intact records after it")

// checkWALTail refuses a newest WAL whose replay would drop intact records
// (see ErrWALCorrupt). A WAL that cannot be read is left to Pebble, with a
// warning.
func (d *DB) checkWALTail() error {
	names, err := d.fs.List(d.dir)
	if err != nil {
		return nil
	}
	type wal struct {
		name string
		num  uint64
	}
	var wals []wal
	for _, n := range names {
		base, ok := strings.CutSuffix(n, ".log")
		if !ok {
			continue
		}
		if num, err := strconv.ParseUint(base, 10, 64); err == nil {
			wals = append(wals, wal{n, num})
		}
	}
	if len(wals) == 0 {
		return nil
	}
	sort.Slice(wals, func(i, j int) bool { return wals[i].num < wals[j].num })
	last := wals[len(wals)-1]
	path := d.fs.PathJoin(d.dir, last.name)
	f, err := d.fs.Open(path)
	if err != nil {
		d.log.Warn("storage: cannot read the WAL to check it before replay", "file", path, "err", err)
		return nil
	}
	b, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		d.log.Warn("storage: cannot read the WAL to check it before replay", "file", path, "err", err)
		return nil
	}
	stop, intact := walTail(b, uint32(last.num))
	if intact < 0 {
		return nil
	}
	if unwrittenPage(b, stop, intact) {
		// A power loss, not damage: the kernel wrote the WAL's unsynced
		// pages out of order and one never reached the disk (a
		// preallocated file reads zeros there). What follows it was never
		// synced either, so no answer vouched for it beyond the sync
		// interval's bound (strict mode: no answer at all); replay drops
		// it as it drops a torn tail.
		d.log.Warn("storage: the WAL has an unwritten page before records written after it (a power loss before their sync); replay stops there",
			"file", path, "unwritten_from", stop, "dropped_bytes", len(b)-stop)
		return nil
	}
	return fmt.Errorf("%w: %s is damaged at byte %d, and replay would stop there and drop for good the intact records from byte %d on: restore the data directory from a backup (README: When the disk fails), or accept their loss by cutting the WAL at the damage (truncate -s %d %s) and start again",
		ErrWALCorrupt, path, stop, intact, stop, path)
}
