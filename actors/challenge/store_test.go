package challenge

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

func TestSamplesSurviveRestartAndPurge(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := func() *Client {
		return New(actor.NewActorSystem().Root, Config{Shards: 2, Key: []byte("k"), Store: db})
	}
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
