package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/fraudd/fraudd/storage"
)

// startDebug serves Go's profiling endpoints on their own listener, never on
// the API port, so profiles can be taken under load (`go tool pprof
// http://127.0.0.1:6060/debug/pprof/profile?seconds=10`). /debug/storage
// shows the store's write counters and Pebble's metrics: read it before and
// after a load run to get commits, keys and syncs per request.
//
// A listen error stops the start, as it does for --addr, --admin-addr and
// --metrics-addr: an operator who asked for profiles and got a start without
// them (an ERROR line among the INFO) finds out when they are needed. The
// caller closes the server on shutdown.
func startDebug(addr string, db *storage.DB, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --debug-addr %s: %w", addr, err)
	}
	log.Info("pprof debug endpoints served", "debug_addr", ln.Addr().String())
	srv := &http.Server{Handler: debugMux(db), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// debugMux routes the profiles and, with a store, /debug/storage.
// /debug/pprof/cmdline is left out on purpose: it prints the process's
// arguments, and those may carry --admin-token or --secret. It answers 404
// like any unknown profile.
func debugMux(db *storage.DB) *http.ServeMux {
	mux := http.NewServeMux()
	if db != nil {
		mux.HandleFunc("/debug/storage", func(w http.ResponseWriter, _ *http.Request) {
			st := db.WriteStats()
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintf(w, "commits %d\nkeys %d\nsyncs %d\nlate_syncs %d\nhist_changes %d\nhist_journalled %d\nhist_folded %d\n\n%s",
				st.Commits, st.Keys, st.Syncs, st.LateSyncs, st.HistChanges, st.HistJournalled, st.HistFolded, db.Metrics())
		})
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", http.NotFound)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
