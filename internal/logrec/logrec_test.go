package logrec

import "testing"

func TestFindKeepsMessageAndAttrs(t *testing.T) {
	var r Recorder
	log := r.Logger()
	log.Warn("shard outlived Stop", "shard", 3)
	log.Info("other")
	if got := r.Find("outlived"); len(got) != 1 || got[0] != "shard outlived Stop shard=3" {
		t.Fatalf("Find(outlived) = %q", got)
	}
	if got := r.Find("missing"); len(got) != 0 {
		t.Fatalf("Find(missing) = %q", got)
	}
}
