package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/metrics"
	"github.com/fraudd/fraudd/storage"
)

// metricSources are the parts whose figures are read at scrape time.
type metricSources struct {
	kinds   *actors.Kinds
	db      *storage.DB
	quota   *quota.Client
	events  *events.Client
	history *devicehist.Client
	hooks   *webhook.Service
	feeds   *netlists.Store
	clock   clock.Clock
	// cluster is nil on a single node.
	cluster clusterCounts
}

// clusterCounts are a cluster node's routing figures (*clusterserve.Node).
type clusterCounts interface {
	RemoteCalls() int64
	LeasedCharges() int64
	LeasedRests() int64
	MirrorHits() int64
	MirrorLateUses() int64
	MirrorDroppedPushes() int64
	PipeCalls() int64
	PipeFrames() int64
	LeaseCalls() int64
	Settles() int64
	Discounts() int64
}

// addSources registers the scrape-time figures: actor mailboxes and shards,
// group commits, the store's writes and syncs and Pebble's own metrics, feed
// ages and webhook outcomes. Nothing here runs on the request path; every
// read is of counters the parts keep anyway.
func addSources(m *metrics.Metrics, src metricSources) error {
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	one := func(f func() float64) func(func(string, float64)) {
		return func(emit func(string, float64)) { emit("", f()) }
	}
	err := m.Add(
		metrics.Source{Name: "actor_mailbox_depth", Help: "Messages waiting in the mailboxes of one kind of actor shard, summed over its shards.", Type: gauge, Label: "kind",
			Read: func(emit func(string, float64)) {
				sums := map[string]int{}
				var order []string
				src.kinds.Depths(func(kind string, depth int) {
					if _, ok := sums[kind]; !ok {
						order = append(order, kind)
					}
					sums[kind] += depth
				})
				for _, k := range order {
					emit(k, float64(sums[k]))
				}
			}},
		metrics.Source{Name: "actor_shards_down", Help: "Actor shards stopped by their supervisor or stuck (GET /readyz answers 503 while it is above 0).", Type: gauge,
			Read: one(func() float64 { return float64(len(src.kinds.Down())) })},
		metrics.Source{Name: "group_commit_groups_total", Help: "Groups (one store batch each) written by a group committer; items_total / groups_total is the mean group size.", Type: counter, Label: "committer",
			Read: func(emit func(string, float64)) {
				for _, g := range groupStats(src) {
					emit(g.kind, float64(g.groups))
				}
			}},
		metrics.Source{Name: "group_commit_items_total", Help: "Items (usage deltas, device events, history writes) written by a group committer.", Type: counter, Label: "committer",
			Read: func(emit func(string, float64)) {
				for _, g := range groupStats(src) {
					emit(g.kind, float64(g.items))
				}
			}},
		metrics.Source{Name: "store_commits_total", Help: "Batches committed to the store.", Type: counter,
			Read: one(func() float64 { return float64(src.db.WriteStats().Commits) })},
		metrics.Source{Name: "store_syncs_total", Help: "WAL syncs the service asked for: strict commits and group syncs.", Type: counter,
			Read: one(func() float64 { return float64(src.db.WriteStats().Syncs) })},
		metrics.Source{Name: "store_late_syncs_total", Help: "Usage commits that synced themselves because the group sync ran late.", Type: counter,
			Read: one(func() float64 { return float64(src.db.WriteStats().LateSyncs) })},
		metrics.Source{Name: "store_hist_changes_total", Help: "Device-history key changes written: in place the first time a key changes in a window of a few seconds, through the journal after that.", Type: counter,
			Read: one(func() float64 { return float64(src.db.WriteStats().HistChanges) })},
		metrics.Source{Name: "store_hist_journalled_total", Help: "Device-history key changes that went through the journal.", Type: counter,
			Read: one(func() float64 { return float64(src.db.WriteStats().HistJournalled) })},
		metrics.Source{Name: "store_hist_folded_total", Help: "Device-history keys the journal's folds wrote in place, each once per window however often it changed: journalled_total minus folded_total is the writes the journal saved.", Type: counter,
			Read: one(func() float64 { return float64(src.db.WriteStats().HistFolded) })},
		metrics.Source{Name: "feed_age_seconds", Help: "Age of each loaded feed's snapshot, from its date (midnight UTC; feeds without a date are not listed).", Type: gauge, Label: "feed",
			Read: func(emit func(string, float64)) {
				now := src.clock.Now()
				for _, f := range src.feeds.Current().Feeds() {
					if d, err := time.Parse(time.DateOnly, f.Date); err == nil {
						emit(f.Name, now.Sub(d).Seconds())
					}
				}
			}},
		metrics.Source{Name: "feed_entries", Help: "Entries of each feed (0: not loaded).", Type: gauge, Label: "feed",
			Read: func(emit func(string, float64)) {
				for _, f := range src.feeds.Current().Feeds() {
					emit(f.Name, float64(f.Entries))
				}
			}},
		metrics.Source{Name: "webhook_attempts_total", Help: "Finished webhook delivery attempts by outcome: delivered (2xx), retrying (failed, another attempt is due), failed (the last attempt failed).", Type: counter, Label: "outcome",
			Read: func(emit func(string, float64)) {
				d, r, f := src.hooks.Outcomes()
				emit("delivered", float64(d))
				emit("retrying", float64(r))
				emit("failed", float64(f))
			}},
		metrics.Source{Name: "webhook_dropped_total", Help: "Webhook events never queued because their account already had 1,000 waiting or retrying (a receiver that has been failing or slow for long); each is logged with its event_id (the first per account as a warning, the rest at debug level).", Type: counter,
			Read: func(emit func(string, float64)) { emit("", float64(src.hooks.Dropped())) }},
	)
	if err != nil {
		return err
	}
	if c := src.cluster; c != nil {
		err = m.Add(
			metrics.Source{Name: "cluster_owner_calls_total", Help: "Round trips to other members for the accounts this node does not own: charges and usage reads at the owner (call), and allowance lease requests and reports (lease).", Type: counter, Label: "kind",
				Read: func(emit func(string, float64)) {
					emit("call", float64(c.RemoteCalls()))
					emit("lease", float64(c.LeaseCalls()))
				}},
			metrics.Source{Name: "cluster_leased_charges_total", Help: "Charges this node served from slices of an account's allowance lent by its owner, with no round trip.", Type: counter,
				Read: func(emit func(string, float64)) { emit("", float64(c.LeasedCharges())) }},
			metrics.Source{Name: "cluster_settled_calls_total", Help: "Charging calls to another member that broke after they were sent (or whose answer came under a stale claim), settled with that member so that they do not count (the request was answered 503, or served by the new owner).", Type: counter,
				Read: func(emit func(string, float64)) { emit("", float64(c.Settles())) }},
			metrics.Source{Name: "cluster_discounts_total", Help: "Calls this node gave back (settled) after another member had read its share of the account with the call in it, sent to that member to take out of its load of the account.", Type: counter,
				Read: func(emit func(string, float64)) { emit("", float64(c.Discounts())) }},
			metrics.Source{Name: "cluster_pipe_calls_total", Help: "Calls this node sent to other members on their pipes (one long-lived stream per member); over cluster_pipe_frames_total, the calls that shared a frame.", Type: counter,
				Read: func(emit func(string, float64)) { emit("", float64(c.PipeCalls())) }},
			metrics.Source{Name: "cluster_pipe_frames_total", Help: "Frames that carried this node's calls to other members on their pipes.", Type: counter,
				Read: func(emit func(string, float64)) { emit("", float64(c.PipeFrames())) }},
			metrics.Source{Name: "cluster_mirrored_evaluations_total", Help: "Leased evaluations whose device event was stored at the account's owner, answered from this node's mirror of the owner's device history, with no round trip.", Type: counter,
				Read: func(emit func(string, float64)) { emit("", float64(c.MirrorHits())) }},
			metrics.Source{Name: "cluster_mirror_late_uses_total", Help: "Device events this node stored whose first use a lease holder answered from its mirror after another node had used the event (within a stream round trip): an evaluation answered device_replayed false that a single node would have answered true.", Type: counter,
				Read: func(emit func(string, float64)) { emit("", float64(c.MirrorLateUses())) }},
			metrics.Source{Name: "cluster_mirror_dropped_pushes_total", Help: "Pushes of the device-history records a lease holder's first watch of an account is sent that this node dropped because the holder's stream had more than 64 MiB queued: the holder asks for the records it then finds missing, one round trip each.", Type: counter,
				Read: func(emit func(string, float64)) { emit("", float64(c.MirrorDroppedPushes())) }},
			metrics.Source{Name: "cluster_leased_rests_total", Help: "Leased evaluations whose device event was stored at the account's owner: the owner resolved it and observed its device history, in one round trip.", Type: counter,
				Read: func(emit func(string, float64)) { emit("", float64(c.LeasedRests())) }},
		)
		if err != nil {
			return err
		}
	}
	return m.Register(newStoreCollector(src.db))
}

type groupStat struct {
	kind          string
	groups, items uint64
}

func groupStats(src metricSources) []groupStat {
	var out []groupStat
	add := func(kind string, g, i uint64) { out = append(out, groupStat{kind, g, i}) }
	g, i := src.quota.Stats()
	add("quota", g, i)
	g, i = src.events.Stats()
	add("events", g, i)
	g, i = src.history.Stats()
	add("devicehist", g, i)
	return out
}

// storeCollector reads Pebble's metrics once per scrape (they take a lock
// and some work inside Pebble) and reports them as separate families.
type storeCollector struct {
	db                                                  *storage.DB
	debt, readAmp, hits, misses, ratio, cacheBytes      *prometheus.Desc
	memtable, disk, compacting, flushes, compacts, sync *prometheus.Desc
}

func newStoreCollector(db *storage.DB) *storeCollector {
	d := metrics.Desc
	return &storeCollector{db: db,
		debt:       d("pebble_compaction_debt_bytes", "Bytes Pebble's compactions must still rewrite for the LSM to settle; growing without end means writes outpace compactions."),
		readAmp:    d("pebble_read_amplification", "Sublevels and levels a read may have to visit."),
		hits:       d("pebble_block_cache_hits_total", "Block cache lookups that hit."),
		misses:     d("pebble_block_cache_misses_total", "Block cache lookups that missed (a read from the OS)."),
		ratio:      d("pebble_block_cache_hit_ratio", "Block cache hits over lookups since the store opened (NaN before the first lookup)."),
		cacheBytes: d("pebble_block_cache_bytes", "Bytes held in the block cache."),
		memtable:   d("pebble_memtable_bytes", "Bytes allocated to memtables."),
		disk:       d("pebble_disk_bytes", "Bytes the store takes on disk (tables, WAL, manifest)."),
		compacting: d("pebble_compactions_in_progress", "Compactions running now."),
		flushes:    d("pebble_flushes_total", "Memtable flushes finished."),
		compacts:   d("pebble_compactions_total", "Compactions finished."),
		sync:       d("store_sync_seconds", "Duration of each WAL fsync (group syncs, strict commits, Pebble's own); Pebble's histogram, restarted when the store reopens."),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.debt, c.readAmp, c.hits, c.misses, c.ratio, c.cacheBytes, c.memtable, c.disk, c.compacting, c.flushes, c.compacts, c.sync} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.db.StoreStats()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.debt, float64(st.CompactionDebt))
	gauge(c.readAmp, float64(st.ReadAmp))
	counter(c.hits, float64(st.BlockCacheHits))
	counter(c.misses, float64(st.BlockCacheMisses))
	gauge(c.ratio, float64(st.BlockCacheHits)/float64(st.BlockCacheHits+st.BlockCacheMisses))
	gauge(c.cacheBytes, float64(st.BlockCacheBytes))
	gauge(c.memtable, float64(st.MemTableBytes))
	gauge(c.disk, float64(st.DiskBytes))
	gauge(c.compacting, float64(st.CompactionsInProgress))
	counter(c.flushes, float64(st.Flushes))
	counter(c.compacts, float64(st.Compactions))
	ch <- prometheus.MustNewConstHistogram(c.sync, st.Syncs.Count, st.Syncs.Sum, st.Syncs.Buckets)
}

// startMetrics serves /metrics without auth on its own listener
// (--metrics-addr), for a scraper on a private network; a listen error stops
// the start.
func startMetrics(addr string, m *metrics.Metrics, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	log.Info("metrics served without auth", "metrics_addr", ln.Addr().String(), "path", "/metrics")
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
