package storage

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Evaluation is one entry of an account's recent-evaluations ring (the
// console's list, GET /admin/v1/accounts/{id}/evaluations). Keys are
// prefixEvaluation + account id + 0x00 + 8-byte big-endian Unix nanoseconds
// + 4-byte big-endian sequence number, so one account's entries are
// contiguous and time-ordered: a reverse scan lists newest first, and the
// 7-day retention is one range delete per account. Account ids never contain
// a 0x00 byte. The ring's owner (actors/recent) keeps each account to its
// 200 newest entries with point deletes of the ones that fall out.
type Evaluation struct {
	Account string
	At      time.Time // stored in the key and the value
	Seq     uint32    // stored in the key only: tells apart entries of one nanosecond
	// RequestID is the answer's X-Request-Id.
	RequestID string
	// Decision and EngineDecision are allow, review or block.
	Decision       string
	EngineDecision string
	// Source is who decided: "" (the engine), "rules" or "exception".
	Source string
	// Rule is the signal of the deciding rule (Source "rules"); RuleMatched
	// every signal whose rule applied.
	Rule        string
	RuleMatched []string
	// Exception names the deciding pin (Source "exception").
	Exception string
	Risk      int
	Reasons   []string
	// IP is the visitor's address, "unknown" on the degraded answer.
	IP      string
	Country string
	// Test: a personal test key or a fixed test_* token answered.
	Test bool
}

const evaluationVersion = 1

// MarshalEvaluation appends the binary form of e (everything but Account and
// Seq, which are in the key).
func MarshalEvaluation(dst []byte, e *Evaluation) []byte {
	dst = append(dst, evaluationVersion)
	dst = appendTime(dst, e.At)
	dst = appendString(dst, e.RequestID)
	dst = appendString(dst, e.Decision)
	dst = appendString(dst, e.EngineDecision)
	dst = appendString(dst, e.Source)
	dst = appendString(dst, e.Rule)
	dst = appendStrings(dst, e.RuleMatched)
	dst = appendString(dst, e.Exception)
	dst = appendUvarint(dst, uint64(min(max(e.Risk, 0), 100)))
	dst = appendStrings(dst, e.Reasons)
	dst = appendString(dst, e.IP)
	dst = appendString(dst, e.Country)
	dst = appendBool(dst, e.Test)
	return dst
}

// UnmarshalEvaluation decodes MarshalEvaluation output. Account and Seq are
// left zero (they live in the key).
func UnmarshalEvaluation(b []byte) (*Evaluation, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != evaluationVersion {
		return nil, fmt.Errorf("evaluation record version %d: %w", v, errCorrupt)
	}
	e := &Evaluation{At: r.time(), RequestID: r.string(), Decision: r.string(), EngineDecision: r.string(),
		Source: r.string(), Rule: r.string(), RuleMatched: r.strings(), Exception: r.string()}
	risk := r.uvarint()
	e.Reasons, e.IP, e.Country, e.Test = r.strings(), r.string(), r.string(), r.bool()
	if r.err == nil && (risk > 100 || len(r.b) != 0) {
		r.err = errCorrupt
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode evaluation: %w", r.err)
	}
	e.Risk = int(risk)
	return e, nil
}

// EvalRef names one stored entry of an account: the rest of its key.
type EvalRef struct {
	At  time.Time
	Seq uint32
}

// Before reports whether r's key sorts before o's (by time, then sequence).
func (r EvalRef) Before(o EvalRef) bool {
	a, b := evalNanos(r.At), evalNanos(o.At)
	return a < b || a == b && r.Seq < o.Seq
}

// evalTail is the length of a key after the account id and its 0x00.
const evalTail = 8 + 4

func evalPrefix(dst []byte, account string) []byte {
	return accountPrefix(dst, prefixEvaluation, account)
}

func evalNanos(t time.Time) uint64 { return uint64(max(t.UnixNano(), 0)) }

// evalKey is the key of account's entry ref.
func evalKey(dst []byte, account string, ref EvalRef) []byte {
	dst = evalPrefix(dst, account)
	dst = binary.BigEndian.AppendUint64(dst, evalNanos(ref.At))
	return binary.BigEndian.AppendUint32(dst, ref.Seq)
}

// evalAt is the first key of account at or after t.
func evalAt(account string, t time.Time) []byte { return accountAt(prefixEvaluation, account, t) }

// evalEnd is the first key after every entry of account.
func evalEnd(account string) []byte { return accountEnd(prefixEvaluation, account) }

// parseEvalKey splits a key of account's range into its ref.
func parseEvalKey(k []byte, account string) (EvalRef, bool) {
	if len(k) != 1+len(account)+1+evalTail {
		return EvalRef{}, false
	}
	tail := k[1+len(account)+1:]
	return EvalRef{At: time.Unix(0, int64(binary.BigEndian.Uint64(tail))).UTC(), Seq: binary.BigEndian.Uint32(tail[8:])}, true
}

// EvalWrite is one commit of the ring's owner: entries to store, entries
// to drop (those that fell out of an account's ring), and ranges to drop
// (the entries of an account between two refs, in one range delete).
type EvalWrite struct {
	Put    []*Evaluation
	Delete []EvalDelete
	Trim   []EvalTrim
}

// EvalTrim drops account's entries from From (the account's first entry
// when !HasFrom) up to To, To excluded. It is applied after the batch's
// puts, so it drops an entry put in the same batch too.
type EvalTrim struct {
	Account string
	HasFrom bool
	From    EvalRef
	To      EvalRef
}

// EvalDelete names an entry to drop.
type EvalDelete struct {
	Account string
	Ref     EvalRef
}

// WriteEvaluations commits w as one write-behind batch (synced within
// Options.SyncInterval): the list is a view nobody pays for, and a crash
// loses at most the entries of the last moments.
func (d *DB) WriteEvaluations(w *EvalWrite) error {
	if len(w.Put) == 0 && len(w.Delete) == 0 && len(w.Trim) == 0 {
		return nil
	}
	b := d.newBatch()
	var key, val []byte
	for _, e := range w.Put {
		key = evalKey(key[:0], e.Account, EvalRef{At: e.At, Seq: e.Seq})
		val = MarshalEvaluation(val[:0], e)
		_ = b.Set(key, val, nil) // Set copies key and value into the batch
	}
	for _, x := range w.Delete {
		key = evalKey(key[:0], x.Account, x.Ref)
		_ = b.Delete(key, nil)
	}
	for _, t := range w.Trim {
		if t.HasFrom {
			key = evalKey(key[:0], t.Account, t.From)
		} else {
			key = evalPrefix(key[:0], t.Account)
		}
		val = evalKey(val[:0], t.Account, t.To)
		_ = b.DeleteRange(key, val, nil) // copies both
	}
	return d.commitBehind(b)
}

// EvaluationRefs returns the refs of account's newest limit entries, newest
// first, reading keys only; more reports whether older ones exist too.
func (d *DB) EvaluationRefs(account string, limit int) (refs []EvalRef, more bool, err error) {
	it, err := d.newIter(evalPrefix(nil, account), evalEnd(account))
	if err != nil {
		return nil, false, err
	}
	defer it.Close()
	for ok := it.Last(); ok; ok = it.Prev() {
		ref, valid := parseEvalKey(it.Key(), account)
		if !valid {
			continue
		}
		if len(refs) == limit {
			more = true
			break
		}
		refs = append(refs, ref)
	}
	if err := it.Err("iterate evaluations"); err != nil {
		return nil, false, err
	}
	return refs, more, nil
}

// RecentEvaluations returns up to limit of account's entries made at or
// after since, newest first.
func (d *DB) RecentEvaluations(account string, since time.Time, limit int) ([]*Evaluation, error) {
	lo := evalPrefix(nil, account)
	if !since.IsZero() {
		lo = evalAt(account, since)
	}
	it, err := d.newIter(lo, evalEnd(account))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := []*Evaluation{}
	for ok := it.Last(); ok && len(out) < limit; ok = it.Prev() {
		ref, valid := parseEvalKey(it.Key(), account)
		if !valid {
			continue
		}
		v, err := it.Value()
		if err != nil {
			return nil, it.Err("iterate evaluations")
		}
		e, err := UnmarshalEvaluation(v)
		if err != nil {
			return nil, fmt.Errorf("evaluation %x: %w", it.Key(), err)
		}
		e.Account, e.Seq = account, ref.Seq
		out = append(out, e)
	}
	if err := it.Err("iterate evaluations"); err != nil {
		return nil, err
	}
	return out, nil
}

// TrimEvaluations deletes every entry of account older than keep (keep
// itself stays), in one range delete.
func (d *DB) TrimEvaluations(account string, keep EvalRef) error {
	b := d.newBatch()
	_ = b.DeleteRange(evalPrefix(nil, account), evalKey(nil, account, keep), nil)
	return d.commitBehind(b)
}

// PruneEvaluations deletes every account's entries made before before: one
// seek and one range delete per account that has entries, never a scan of
// the entries themselves.
func (d *DB) PruneEvaluations(before time.Time) error {
	return d.pruneAccounts(prefixEvaluation, before, d.commitBehind)
}
