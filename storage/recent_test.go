package storage

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestEvaluationFormatPinned fails when the on-disk form of a recent
// evaluation or its key changes: a change must bump the version byte.
func TestEvaluationFormatPinned(t *testing.T) {
	e := &Evaluation{At: time.Unix(1, 0).UTC(), RequestID: "r", Decision: "block", EngineDecision: "allow",
		Source: "rules", Rule: "vpn", RuleMatched: []string{"vpn"}, Risk: 70, Reasons: []string{"vpn_detected"},
		IP: "1.2.3.4", Country: "DE", Test: true}
	const want = "01" + "8194ebdc03" + "0172" + "05626c6f636b" + "05616c6c6f77" + "0572756c6573" + "0376706e" +
		"01" + "0376706e" + "00" + "46" + "01" + "0c76706e5f6465746563746564" + "07312e322e332e34" + "024445" + "01"
	got := MarshalEvaluation(nil, e)
	if hex.EncodeToString(got) != want {
		t.Fatalf("evaluation format changed: %x", got)
	}
	back, err := UnmarshalEvaluation(got)
	if err != nil || !reflect.DeepEqual(back, e) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	const wantKey = "43" + "6163635f61" + "00" + "000000003b9aca00" + "00000007"
	if k := hex.EncodeToString(evalKey(nil, "acc_a", EvalRef{At: e.At, Seq: 7})); k != wantKey {
		t.Fatalf("evaluation key changed: %s", k)
	}
	if _, err := UnmarshalEvaluation([]byte{2}); err == nil {
		t.Fatal("unknown version decoded")
	}
	for n := 1; n < len(got); n++ {
		if _, err := UnmarshalEvaluation(got[:n]); err == nil {
			t.Fatalf("record truncated to %d bytes decoded", n)
		}
	}
	if _, err := UnmarshalEvaluation(append(got, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

func evalAtMinute(account string, i int, seq uint32) *Evaluation {
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	return &Evaluation{Account: account, At: base.Add(time.Duration(i) * time.Minute), Seq: seq,
		RequestID: fmt.Sprintf("req_%d", i), Decision: "allow", EngineDecision: "allow", IP: "203.0.113.7"}
}

func requestIDs(es []*Evaluation) string {
	s := ""
	for _, e := range es {
		s += e.RequestID + " "
	}
	return s
}

func TestEvaluationsRing(t *testing.T) {
	db := deliveriesDB(t)
	var w EvalWrite
	for i := 0; i < 5; i++ {
		for _, acc := range []string{"acc_a", "acc_b", "acc_a0"} {
			w.Put = append(w.Put, evalAtMinute(acc, i, uint32(i)))
		}
	}
	// Two entries in one nanosecond, told apart by their sequence.
	twin := evalAtMinute("acc_a", 4, 99)
	twin.RequestID = "req_4b"
	w.Put = append(w.Put, twin)
	if err := db.WriteEvaluations(&w); err != nil {
		t.Fatal(err)
	}
	got, err := db.RecentEvaluations("acc_a", time.Time{}, 3)
	if err != nil || requestIDs(got) != "req_4b req_4 req_3 " {
		t.Fatalf("newest first: %s %v", requestIDs(got), err)
	}
	for _, e := range got {
		if e.Account != "acc_a" {
			t.Fatalf("another account's entry: %+v", e)
		}
	}
	if got[0].Seq != 99 || got[1].Seq != 4 {
		t.Fatalf("sequence from the key: %d %d", got[0].Seq, got[1].Seq)
	}
	since := evalAtMinute("", 3, 0).At
	if got, _ := db.RecentEvaluations("acc_a", since, 200); requestIDs(got) != "req_4b req_4 req_3 " {
		t.Fatalf("since: %s", requestIDs(got))
	}
	if got, _ := db.RecentEvaluations("acc_none", time.Time{}, 200); got == nil || len(got) != 0 {
		t.Fatalf("unknown account: %v", got)
	}

	refs, more, err := db.EvaluationRefs("acc_a", 4)
	if err != nil || !more || len(refs) != 4 || refs[0].Seq != 99 || refs[3] != (EvalRef{At: evalAtMinute("", 2, 0).At, Seq: 2}) {
		t.Fatalf("refs: %v %v %v", refs, more, err)
	}
	if refs, more, _ := db.EvaluationRefs("acc_b", 200); len(refs) != 5 || more {
		t.Fatalf("refs under the limit: %d %v", len(refs), more)
	}

	// The owner drops what falls out of the ring by point deletes, and an
	// excess found on load with one range delete.
	w = EvalWrite{Delete: []EvalDelete{{Account: "acc_a", Ref: EvalRef{At: evalAtMinute("", 4, 0).At, Seq: 4}}}}
	if err := db.WriteEvaluations(&w); err != nil {
		t.Fatal(err)
	}
	if err := db.TrimEvaluations("acc_a", EvalRef{At: evalAtMinute("", 2, 0).At, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.RecentEvaluations("acc_a", time.Time{}, 200); requestIDs(got) != "req_4b req_3 req_2 " {
		t.Fatalf("after delete and trim: %s", requestIDs(got))
	}
	if got, _ := db.RecentEvaluations("acc_a0", time.Time{}, 200); len(got) != 5 {
		t.Fatalf("trim touched a neighbour: %d", len(got))
	}

	// Retention: one range delete per account.
	if err := db.PruneEvaluations(evalAtMinute("", 3, 0).At); err != nil {
		t.Fatal(err)
	}
	for acc, want := range map[string]string{"acc_a": "req_4b req_3 ", "acc_b": "req_4 req_3 ", "acc_a0": "req_4 req_3 "} {
		if got, _ := db.RecentEvaluations(acc, time.Time{}, 200); requestIDs(got) != want {
			t.Errorf("%s after prune: %s", acc, requestIDs(got))
		}
	}
	if err := db.PruneEvaluations(evalAtMinute("", 60, 0).At); err != nil {
		t.Fatal(err)
	}
	if err := db.PruneEvaluations(evalAtMinute("", 60, 0).At); err != nil {
		t.Fatalf("prune of nothing: %v", err)
	}
	for _, acc := range []string{"acc_a", "acc_b", "acc_a0"} {
		if got, _ := db.RecentEvaluations(acc, time.Time{}, 200); len(got) != 0 {
			t.Errorf("%s kept %d past retention", acc, len(got))
		}
	}
}

// TestEvaluationCorruptValue: a damaged stored entry is an error naming its
// key, not a panic or a silently wrong list.
func TestEvaluationCorruptValue(t *testing.T) {
	db := deliveriesDB(t)
	e := evalAtMinute("acc_a", 1, 1)
	b := db.newBatch()
	_ = b.Set(evalKey(nil, "acc_a", EvalRef{At: e.At, Seq: 1}), []byte{1, 0xff}, nil)
	if err := db.commitBehind(b); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecentEvaluations("acc_a", time.Time{}, 200); err == nil {
		t.Fatal("corrupt entry listed")
	}
}

// FuzzUnmarshalEvaluation: stored entries are outside input to the decoder
// (a damaged disk, an older or newer binary); it never panics, and what it
// accepts re-encodes to the same bytes.
func FuzzUnmarshalEvaluation(f *testing.F) {
	f.Add(MarshalEvaluation(nil, evalAtMinute("a", 1, 0)))
	f.Add(MarshalEvaluation(nil, &Evaluation{At: time.Unix(1, 0), RuleMatched: []string{"vpn", "tor"}, Reasons: []string{"x"}, Risk: 100, Test: true}))
	f.Add([]byte{1})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := UnmarshalEvaluation(b)
		if err != nil {
			return
		}
		if again := MarshalEvaluation(nil, e); !bytes.Equal(again, b) {
			// A bool byte other than 0/1 reads as false and a time past
			// int64 nanoseconds wraps: accepted, but not canonical.
			if e2, err := UnmarshalEvaluation(again); err != nil || !reflect.DeepEqual(e, e2) {
				t.Fatalf("re-encoding changed the entry: %+v vs %+v (%v)", e, e2, err)
			}
		}
	})
}
