package challenge

import (
	"crypto/aes"
	"crypto/cipher"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// storedClients opens an in-memory store and returns a function that starts
// a challenge client on it: each call is a restart of the process's actors.
func storedClients(t *testing.T) func() *Client {
	t.Helper()
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return func() *Client {
		return New(actor.NewActorSystem().Root, Config{Shards: 2, Key: []byte("k"), Store: db})
	}
}

func TestSamplesSurviveRestartAndPurge(t *testing.T) {
	start := storedClients(t)
	c := start()
	if r := gpu(c, t, "e1", "d1", 0.5, t0); r.Status != StatusRecorded {
		t.Fatalf("record: %+v", r)
	}
	c.Stop()

	c = start()
	defer c.Stop()
	if r := gpu(c, t, "e2", "d2", 0.25, t0.Add(time.Minute)); r.Status != StatusRecorded || r.Nearest != "d1" || r.RMS != 0.25 {
		t.Fatalf("after restart: %+v", r)
	}
	if err := c.Purge("a"); err != nil {
		t.Fatal(err)
	}
	again := start()
	defer again.Stop()
	if r := gpu(again, t, "e3", "d3", 0.25, t0.Add(2*time.Minute)); r.Status != StatusRecorded || r.HasNearest {
		t.Fatalf("stored samples survived the purge: %+v", r)
	}
}

// SPEC §8: a feature vector is "retained 30 days after last accepted
// sample". A customer that never comes back after a restart must not keep
// its stored samples past that: the sweep deletes them from the store too.
func TestStoredSamplesOfIdleCustomerExpire(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := []byte("k")
	start := func() *Client {
		return New(actor.NewActorSystem().Root, Config{Shards: 1, Key: key, Store: db})
	}
	c := start()
	if r := gpu(c, t, "e1", "d1", 0.5, t0); r.Status != StatusRecorded {
		t.Fatalf("record: %+v", r)
	}
	c.Stop()

	c = start() // a restart: customer "a" is not resident
	defer c.Stop()
	c.Sweep(t0.Add(Retention + time.Hour))
	c.Counts("b") // the one shard has handled the sweep
	blk, _ := aes.NewCipher(keyed32(key, "gpu-sample-seal"))
	aead, _ := cipher.NewGCM(blk)
	if left, err := db.LoadGPUSamples(aead, "a", time.Time{}); err != nil || len(left) != 0 {
		t.Fatalf("stored samples past retention: %d %v", len(left), err)
	}
}
