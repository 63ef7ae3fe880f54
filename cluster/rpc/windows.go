package rpc

import (
	"sync"
	"time"

	"github.com/fraudd/fraudd/actors/quota"
)

// HandedWindows keeps the hourly windows of the accounts whose shard left
// this node, until each window ends: hourly windows live only in the quota
// actors' memory, so the next owner of an account asks for them with its
// shares (SharesReply.hour) and resumes the one still running. Without
// them a shard move would start every account's hour afresh and admit up
// to another whole hourly cap. Safe for concurrent use.
type HandedWindows struct {
	mu sync.Mutex
	m  map[string][2]quota.HourWindow
}

// NewHandedWindows returns an empty registry.
func NewHandedWindows() *HandedWindows {
	return &HandedWindows{m: map[string][2]quota.HourWindow{}}
}

// Put keeps the windows quota.Client.Drop answered, replacing what was kept
// for the same accounts, and forgets every window over at now.
func (h *HandedWindows) Put(handed []quota.Handed, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for acc, w := range h.m {
		if !w[0].Running(now) && !w[1].Running(now) {
			delete(h.m, acc)
		}
	}
	for _, x := range handed {
		if x.Hour[0].Running(now) || x.Hour[1].Running(now) {
			h.m[x.Account] = x.Hour
		}
	}
}

// Get answers the windows kept for account that still run at now.
func (h *HandedWindows) Get(account string, now time.Time) [2]quota.HourWindow {
	h.mu.Lock()
	w := h.m[account]
	h.mu.Unlock()
	for b := range w {
		if !w[b].Running(now) {
			w[b] = quota.HourWindow{}
		}
	}
	return w
}

// Len counts the accounts with windows kept.
func (h *HandedWindows) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// mergeWindows picks, per bucket, the running window that admitted the
// most: after a chain of moves each owner resumed its predecessor's window
// (same start, a larger count), so the largest is the latest.
func mergeWindows(now time.Time, sets ...[2]quota.HourWindow) [2]quota.HourWindow {
	var out [2]quota.HourWindow
	for _, set := range sets {
		for b, w := range set {
			if w.Running(now) && (w.N > out[b].N || (w.N == out[b].N && w.Start.After(out[b].Start))) {
				out[b] = w
			}
		}
	}
	return out
}

func windowMsgs(w [2]quota.HourWindow) []*HourWindow {
	var out []*HourWindow
	for b, x := range w {
		if x.N > 0 {
			out = append(out, &HourWindow{Bucket: uint32(b), StartUnixNano: x.Start.UnixNano(), N: x.N})
		}
	}
	return out
}

// windowsOf checks the windows of a Shares answer: known buckets, each at
// most once, a count and a start.
func windowsOf(ms []*HourWindow) ([2]quota.HourWindow, bool) {
	var out [2]quota.HourWindow
	for _, m := range ms {
		b := m.GetBucket()
		if b > 1 || m.GetN() <= 0 || m.GetStartUnixNano() <= 0 || out[b].N != 0 {
			return [2]quota.HourWindow{}, false
		}
		out[b] = quota.HourWindow{Start: time.Unix(0, m.StartUnixNano).UTC(), N: m.N}
	}
	return out, true
}
