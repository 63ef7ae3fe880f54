package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fraudd/fraudd/storage"
)

func TestDurabilityFlags(t *testing.T) {
	for _, k := range []string{"FRAUDD_DURABILITY", "FRAUDD_SYNC_INTERVAL"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	for _, c := range []struct {
		env, args []string
		mode      storage.Durability
		every     time.Duration
		err       string
	}{
		{mode: storage.Interval, every: 10 * time.Millisecond},
		{args: []string{"--durability", "strict"}, mode: storage.Strict, every: 10 * time.Millisecond},
		{args: []string{"--sync-interval", "25ms"}, mode: storage.Interval, every: 25 * time.Millisecond},
		{env: []string{"FRAUDD_DURABILITY", "strict", "FRAUDD_SYNC_INTERVAL", "2ms"}, mode: storage.Strict, every: 2 * time.Millisecond},
		{env: []string{"FRAUDD_DURABILITY", "strict"}, args: []string{"--durability", "interval"}, mode: storage.Interval, every: 10 * time.Millisecond},
		{args: []string{"--durability", "fsync"}, err: "-durability"},
		{env: []string{"FRAUDD_DURABILITY", "sometimes"}, err: `FRAUDD_DURABILITY="sometimes" is not valid (unknown mode); accepted: interval or strict`},
		{args: []string{"--sync-interval", "0"}, err: "-sync-interval"},
		{args: []string{"--sync-interval", "1m"}, err: "-sync-interval"},
		{env: []string{"FRAUDD_SYNC_INTERVAL", "soon"}, err: "FRAUDD_SYNC_INTERVAL"},
	} {
		env := envVars{}
		for i := 0; i < len(c.env); i += 2 {
			env[c.env[i]] = c.env[i+1]
		}
		cfg, err := parseServe(c.args, env)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v %v: err %v, want one naming %s", c.env, c.args, err, c.err)
			}
			continue
		}
		if err != nil || cfg.durability != c.mode || cfg.syncInterval != c.every {
			t.Errorf("%v %v: %v %v %v, want %v %v", c.env, c.args, err, cfg.durability, cfg.syncInterval, c.mode, c.every)
		}
	}
}
