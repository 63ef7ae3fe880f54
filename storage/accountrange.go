package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
)

// Webhook deliveries and recent evaluations share one key layout: their
// prefix, the account id, 0x00, then the big-endian Unix-nanosecond time of
// the record and the rest of its key. Account ids hold no 0x00 (the
// admin API refuses it), so 0x00 ends the account and 0x01 in its place is
// the first key after all of the account's records.

// accountPrefix appends the first key of account's records under prefix.
func accountPrefix(dst []byte, prefix byte, account string) []byte {
	dst = append(dst, prefix)
	dst = append(dst, account...)
	return append(dst, 0)
}

// accountAt is the first key of account's records made at or after t.
func accountAt(prefix byte, account string, t time.Time) []byte {
	k := accountPrefix(make([]byte, 0, len(account)+2+8), prefix, account)
	return binary.BigEndian.AppendUint64(k, uint64(max(t.UnixNano(), 0)))
}

// accountEnd is the first key after every record of account.
func accountEnd(prefix byte, account string) []byte {
	k := accountPrefix(make([]byte, 0, len(account)+2), prefix, account)
	k[len(k)-1] = 1
	return k
}

// pruneAccounts deletes every account's records under prefix made before
// before: one seek and one range delete per account that has records, never
// a scan of the records themselves. commit applies the batch with the
// durability the kind of record asks for.
func (d *DB) pruneAccounts(prefix byte, before time.Time, commit func(batch) error) error {
	what := fmt.Sprintf("prune records under prefix %#x", prefix)
	it, err := d.newIter([]byte{prefix}, []byte{prefix + 1})
	if err != nil {
		return err
	}
	b := d.newBatch()
	for ok := it.First(); ok; {
		k := it.Key()
		end := bytes.IndexByte(k[1:], 0)
		if end < 0 {
			// Not a record key of ours; step past it.
			ok = it.Next()
			continue
		}
		account := string(k[1 : 1+end])
		_ = b.DeleteRange(accountPrefix(nil, prefix, account), accountAt(prefix, account, before), nil)
		ok = it.SeekGE(accountEnd(prefix, account))
	}
	err = it.Err(what)
	it.Close()
	if err != nil {
		b.Close()
		return err
	}
	if b.Empty() {
		b.Close()
		return nil
	}
	return commit(b)
}
