package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type plan struct {
	Name  string `json:"name"`
	Limit int    `json:"limit"`
}

var planCodec = Codec[plan]{
	Marshal: func(p plan) ([]byte, error) { return json.Marshal(p) },
	Unmarshal: func(b []byte) (plan, error) {
		var p plan
		if err := json.Unmarshal(b, &p); err != nil {
			return plan{}, err
		}
		if p.Name == "" {
			return plan{}, errors.New("plan: no name")
		}
		return p, nil
	},
}

func newPlanStore(t *testing.T, cli *clientv3.Client, prefix string, onChange func(bool, []string)) *Store[plan] {
	t.Helper()
	s, err := NewStore(StoreConfig[plan]{Client: cli, Prefix: prefix, Codec: planCodec, OnChange: onChange})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConfigStoreWritesAndWatch: revision-checked create, update and delete;
// a second node's copy follows through its watch; Wait gives read-your-write.
func TestConfigStoreWritesAndWatch(t *testing.T) {
	cli := newClient(t)
	prefix := ConfigPrefix(testRoot(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	writer := newPlanStore(t, cli, prefix, nil)
	var mu sync.Mutex
	var changed []string
	reader := newPlanStore(t, newClient(t), prefix, func(full bool, keys []string) {
		mu.Lock()
		changed = append(changed, keys...)
		mu.Unlock()
	})
	if err := writer.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := reader.Start(ctx); err != nil {
		t.Fatal(err)
	}

	r1, err := writer.Create(ctx, "acct/1", plan{"pro", 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Create(ctx, "acct/1", plan{"pro", 200}); !errors.Is(err, ErrConflict) {
		t.Fatalf("create over an existing record: %v, want ErrConflict", err)
	}
	r2, err := writer.Update(ctx, "acct/1", plan{"pro", 200}, r1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Update(ctx, "acct/1", plan{"pro", 300}, r1); !errors.Is(err, ErrConflict) {
		t.Fatalf("update on a stale revision: %v, want ErrConflict", err)
	}
	if err := reader.Wait(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if e, ok := reader.Get("acct/1"); !ok || e.Value != (plan{"pro", 200}) || e.Rev != r2 {
		t.Fatalf("reader has %+v %v, want limit 200 at %d", e, ok, r2)
	}
	if _, err := writer.Delete(ctx, "acct/1", r1); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete on a stale revision: %v", err)
	}
	r3, err := writer.Delete(ctx, "acct/1", r2)
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Wait(ctx, r3); err != nil {
		t.Fatal(err)
	}
	if _, ok := reader.Get("acct/1"); ok {
		t.Fatal("deleted record still in the reader's copy")
	}
	mu.Lock()
	if len(changed) != 3 {
		t.Errorf("OnChange saw %v, want acct/1 three times", changed)
	}
	mu.Unlock()

	// A record that does not decode is left out and named, never served.
	if _, err := cli.Put(ctx, prefix+"acct/bad", `{"limit":1}`); err != nil {
		t.Fatal(err)
	}
	eventually(t, "reader names the bad record", func() bool { return slices.Equal(reader.Undecodable(), []string{"acct/bad"}) })
	if _, ok := reader.Get("acct/bad"); ok {
		t.Fatal("undecodable record served")
	}
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer wcancel()
	if err := reader.Wait(wctx, reader.Revision()+1000); err == nil {
		t.Fatal("Wait for a revision nobody wrote returned")
	}
}

// TestConfigRereadsAfterCompaction: a node whose watch falls behind a
// compaction gets ErrCompacted, re-reads the whole prefix and ends with
// exactly what etcd holds — a record deleted in the gap included.
func TestConfigRereadsAfterCompaction(t *testing.T) {
	cli := newClient(t)
	prefix := ConfigPrefix(testRoot(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := cli.Put(ctx, fmt.Sprintf("%sacct/%d", prefix, i), fmt.Sprintf(`{"name":"p%d","limit":%d}`, i, i)); err != nil {
			t.Fatal(err)
		}
	}
	s := newPlanStore(t, newClient(t), prefix, nil)
	release, held := make(chan struct{}), make(chan int64, 1)
	var once sync.Once
	s.onWatch(func(from int64) {
		once.Do(func() {
			held <- from
			<-release
		})
	})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Keys(); !slices.Equal(got, []string{"acct/0", "acct/1", "acct/2"}) {
		t.Fatalf("first read: %v", got)
	}

	firstFrom := <-held
	// While the watch is held back: add, change, delete, then compact past it.
	if _, err := cli.Put(ctx, prefix+"acct/3", `{"name":"p3","limit":3}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, prefix+"acct/0", `{"name":"p0","limit":99}`); err != nil {
		t.Fatal(err)
	}
	del, err := cli.Delete(ctx, prefix+"acct/2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// The watch the store is about to open is now behind the compaction.
	w := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(firstFrom))
	if resp := <-w; !errors.Is(resp.Err(), rpcCompacted) {
		t.Fatalf("a watch from %d after compaction: %v, want ErrCompacted", firstFrom, resp.Err())
	}
	close(release)

	eventually(t, "store re-reads", func() bool { return s.Rereads() >= 2 && s.Revision() >= del.Header.Revision })
	if got := s.Keys(); !slices.Equal(got, []string{"acct/0", "acct/1", "acct/3"}) {
		t.Fatalf("after the re-read: %v, want acct/0 acct/1 acct/3", got)
	}
	if e, _ := s.Get("acct/0"); e.Value.Limit != 99 {
		t.Fatalf("acct/0 = %+v, want limit 99", e)
	}

	// The watch resumes from the re-read: later changes arrive without
	// another re-read.
	n := s.Rereads()
	put, err := cli.Put(ctx, prefix+"acct/4", `{"name":"p4","limit":4}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(ctx, put.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("acct/4"); !ok || s.Rereads() != n {
		t.Fatalf("after a put: present %v, re-reads %d → %d", ok, n, s.Rereads())
	}
}

// TestStoreModifyIsSerializable: concurrent read-modify-writes through
// Modify lose no update.
func TestStoreModifyIsSerializable(t *testing.T) {
	prefix := ConfigPrefix(testRoot(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const writers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for range writers {
		s := newPlanStore(t, newClient(t), prefix, nil)
		wg.Go(func() {
			for range each {
				_, err := s.Modify(ctx, func(tx *Tx[plan]) error {
					p, ok, err := tx.Get("counter")
					if err != nil {
						return err
					}
					if !ok {
						p = plan{Name: "counter"}
					}
					p.Limit++
					return tx.Put("counter", p)
				})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	resp, err := newClient(t).Get(ctx, prefix+"counter")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(resp, err)
	}
	p, err := planCodec.Unmarshal(resp.Kvs[0].Value)
	if err != nil || p.Limit != writers*each {
		t.Fatalf("counter = %+v (%v), want %d", p, err, writers*each)
	}
}

func TestNewStoreRefusesIncompleteConfig(t *testing.T) {
	if _, err := NewStore(StoreConfig[plan]{Prefix: "/x/", Codec: planCodec}); err == nil {
		t.Fatal("no client accepted")
	}
	if _, err := NewStore(StoreConfig[plan]{Client: newClient(t), Codec: planCodec}); err == nil {
		t.Fatal("no prefix accepted")
	}
}

func FuzzDecodeMemberInfo(f *testing.F) {
	f.Add([]byte(`{"id":"a","addr":"127.0.0.1:7000","proto":1,"epoch":1,"started":"2026-11-23T00:00:00Z"}`))
	f.Add([]byte(`{"id":"","proto":1,"epoch":1}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		mi, err := DecodeMemberInfo(b)
		if err != nil {
			return
		}
		if mi.ID == "" || mi.Proto <= 0 || mi.Epoch <= 0 {
			t.Fatalf("accepted %+v", mi)
		}
		again, err := memberCodec.Marshal(mi)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := DecodeMemberInfo(again); err != nil || back.ID != mi.ID || back.Epoch != mi.Epoch {
			t.Fatalf("round trip %+v → %+v, %v", mi, back, err)
		}
	})
}

// TestStoreWaitAfterALongCatchUp: a watch that starts behind etcd by more
// than etcd sends in one response (1,000 revisions) gets its events in
// several responses, each stamped with etcd's current revision. Wait must
// not return before every record up to the revision it waits for is in the
// copy. Before, the first response moved the store's revision to the end,
// and Wait returned with the last records missing.
func TestStoreWaitAfterALongCatchUp(t *testing.T) {
	cli := newClient(t)
	prefix := ConfigPrefix(testRoot(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newPlanStore(t, newClient(t), prefix, nil)
	const n = 1100 // revisions, one put each
	var last atomic.Int64
	var once sync.Once
	s.onWatch(func(int64) {
		once.Do(func() {
			var wg sync.WaitGroup
			next := make(chan int)
			for range 8 {
				wg.Go(func() {
					for i := range next {
						resp, err := cli.Put(ctx, fmt.Sprintf("%sacct/%04d", prefix, i), fmt.Sprintf(`{"name":"p%d","limit":%d}`, i, i))
						if err != nil {
							t.Error(err)
							continue
						}
						for cur := last.Load(); resp.Header.Revision > cur && !last.CompareAndSwap(cur, resp.Header.Revision); cur = last.Load() {
						}
					}
				})
			}
			for i := range n {
				next <- i
			}
			close(next)
			wg.Wait()
		})
	})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the puts are made", func() bool { return last.Load() != 0 && len(s.Keys()) > 0 || t.Failed() })
	if err := s.Wait(ctx, last.Load()); err != nil {
		t.Fatal(err)
	}
	if got := len(s.Keys()); got != n {
		t.Fatalf("Wait(%d) returned with %d of %d records in the copy", last.Load(), got, n)
	}
}
