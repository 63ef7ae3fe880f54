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

// TestShutdownPlanKeepsTheGrace: a stop whose every step runs to its
// deadline (a drain that takes all it may, a leave that cannot finish, a
// node-to-node service whose graceful stop hangs) still ends within the 30 s
// a supervisor gives before its kill, with time left for the actors' last
// commits, and a leave after a full drain still has time to hand over.
func TestShutdownPlanKeepsTheGrace(t *testing.T) {
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	p := planShutdown(start)
	leaveFrom := p.drain // the drain ran to its deadline
	leaveBy := p.leaveBy(leaveFrom)
	if got := leaveBy.Sub(leaveFrom); got < 5*time.Second {
		t.Errorf("a leave after a full drain gets %v", got)
	}
	if got := p.leaveBy(start).Sub(start); got != leaveMax {
		t.Errorf("a leave right away gets %v, want %v", got, leaveMax)
	}
	if !leaveBy.Before(p.rpc) || !p.rpc.Before(p.end) {
		t.Errorf("steps out of order: leave %v, rpc %v, end %v", leaveBy, p.rpc, p.end)
	}
	if got := p.end.Sub(start); got > 28*time.Second {
		t.Errorf("the plan ends %v after the signal: too close to a 30 s kill", got)
	}
	if got := p.end.Sub(p.rpc); got < time.Second {
		t.Errorf("the actors and the store get %v after the node-to-node service", got)
	}
}
