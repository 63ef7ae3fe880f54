package feeds

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/fraudd/fraudd/intel/netlists"
)

// DefaultTimeout bounds one whole refresh when the Refresher builds its own
// HTTP client.
const DefaultTimeout = 5 * time.Minute

// Refresher keeps a Store's snapshot fresh: it runs Update, and when any
// feed got a new file it loads the data directory again and swaps the result
// into Store. Lookups keep using the old snapshot until the swap and never
// wait for it.
type Refresher struct {
	Interval time.Duration   // time between refreshes; <= 0 refreshes once
	Sources  []Source        // nil means DefaultSources()
	DataDir  string          // feeds are written to DataDir/feeds
	Store    *netlists.Store // receives each new snapshot
	Client   *http.Client    // nil means a client with DefaultTimeout
	Logger   *slog.Logger    // nil means no logging
}

// Run refreshes now and then every Interval until ctx ends. It returns nil
// when ctx is cancelled, since that is how a server stops it.
func (r *Refresher) Run(ctx context.Context) error {
	for {
		if _, err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			r.logger().Error("feeds refresh failed", "err", err)
		}
		if r.Interval <= 0 {
			return nil
		}
		t := time.NewTimer(r.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Refresh runs one update and swaps in the new snapshot when something
// changed. The returned error covers loading the new snapshot; per-feed
// download failures are logged and reported, and leave the old feed in use.
func (r *Refresher) Refresh(ctx context.Context) (Report, error) {
	log := r.logger()
	client := r.Client
	if client == nil {
		client = &http.Client{Timeout: DefaultTimeout}
	}
	sources := r.Sources
	if sources == nil {
		sources = DefaultSources()
	}
	var cur *netlists.Snapshot
	if r.Store != nil {
		cur = r.Store.Current()
	}
	rep, err := Update(ctx, client, sources, r.DataDir, cur)
	if err != nil {
		return rep, err
	}
	for _, f := range rep.Feeds {
		if f.Err != nil {
			log.Warn("feed not refreshed", "feed", f.Feed, "status", f.Status, "prev_entries", f.Prev, "err", f.Err)
		} else {
			log.Info("feed refreshed", "feed", f.Feed, "date", f.Date, "entries", f.Entries, "prev_entries", f.Prev)
		}
	}
	if rep.Updated() == 0 || r.Store == nil {
		return rep, nil
	}
	snap, err := netlists.LoadDir(r.DataDir)
	if err != nil {
		return rep, fmt.Errorf("feeds: loading refreshed feeds (old snapshot kept): %w", err)
	}
	r.Store.Swap(snap)
	log.Info("feeds snapshot swapped", "updated", rep.Updated())
	return rep, nil
}

func (r *Refresher) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Status lists every feed as LoadDir(dataDir) would load it: name, snapshot
// date, entry count and whether the embedded copy or the data directory's is
// used. It reads file headers only.
func Status(dataDir string) ([]netlists.FeedInfo, error) {
	infos, err := netlists.DirFeeds(dataDir)
	if err != nil {
		return nil, fmt.Errorf("feeds: status: %w", err)
	}
	return infos, nil
}
