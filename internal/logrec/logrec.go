// Package logrec is a slog.Handler that keeps what is logged, for tests
// that check what a component said (a stop that outlived its deadline, a
// panic a shard recovered from) rather than only what it did.
package logrec

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Recorder keeps every record as one line: its message, then its
// attributes as key=value. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	lines []string
}

// Logger is a logger writing to r, at every level.
func (r *Recorder) Logger() *slog.Logger { return slog.New(r) }

// Enabled implements slog.Handler: every level.
func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	r.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler; the attributes are not kept.
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup implements slog.Handler; the group is not kept.
func (r *Recorder) WithGroup(string) slog.Handler { return r }

// Find returns the lines that contain sub.
func (r *Recorder) Find(sub string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}
