package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"

	"github.com/fraudd/fraudd/intel/feeds"
)

const feedsUsage = `usage: fraudd feeds <build|update|status> [flags]

  build   turn the raw snapshots into the compact embedded feed files
          fraudd feeds build --from ../shared/data [--out intel/netlists/data]
  update  download the refreshable feeds from upstream into the data dir
          fraudd feeds update [--data-dir ./data] [--only tor,vpn] [--timeout 5m]
  status  print each feed's date, entry count and origin (embedded or data dir),
          and the inputs it was built from (snapshots, curated files, rules)
          fraudd feeds status [--data-dir ./data]
`

// runFeeds implements `fraudd feeds …`; it returns the process exit code.
func runFeeds(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, feedsUsage)
		return 2
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("fraudd feeds "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := "./data"
	var err error
	switch cmd {
	case "build":
		from := fs.String("from", "../shared/data", "directory of raw snapshots (see its SOURCES.md)")
		out := fs.String("out", "intel/netlists/data", "directory to write the feed files to")
		if code, ok := parseFlags(fs, args); !ok {
			return code
		}
		err = feeds.RunBuild(*from, *out, stdout)
	case "update":
		fs.Var(dirValue{&dataDir}, "data-dir", "data `dir`; feeds go to <data-dir>/feeds (env FRAUDD_DATA_DIR)")
		only := fs.String("only", "", "comma-separated feeds to refresh (default: every feed with an upstream)")
		timeout := feeds.DefaultTimeout
		fs.Var(positiveDuration{&timeout}, "timeout", "the longest `duration` the whole update may take (above 0)")
		if code, ok := parseDataDirFlags(fs, args, stderr); !ok {
			return code
		}
		// It may create the data dir and writes into it: the same umask as
		// serve and backup (README: files 0600, directories 0700), else
		// the next start warns of a data dir others could read.
		restrictUmask()
		var names []string
		if *only != "" {
			names = strings.Split(*only, ",")
		}
		sources, serr := feeds.SelectSources(feeds.DefaultSources(), names)
		if serr != nil {
			fmt.Fprintf(stderr, "fraudd feeds update: %v\n", serr)
			return 2
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err = feeds.RunUpdate(ctx, &http.Client{Timeout: timeout}, sources, dataDir, stdout)
	case "status":
		fs.Var(dirValue{&dataDir}, "data-dir", "data `dir` whose feeds override the embedded ones (env FRAUDD_DATA_DIR)")
		if code, ok := parseDataDirFlags(fs, args, stderr); !ok {
			return code
		}
		err = feeds.RunStatus(dataDir, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, feedsUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "fraudd feeds: unknown command %q\n\n%s", cmd, feedsUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "fraudd feeds %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// parseFlags parses args and rejects stray positional arguments. ok is
// false when the caller should return code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// parseDataDirFlags is parseFlags for a command with --data-dir, which
// alone falls back to its variable, FRAUDD_DATA_DIR, as serve's does: set
// but empty is refused naming it rather than read as ./data.
func parseDataDirFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return code, false
	}
	if err := envFallback(fs, "data-dir", osEnv()); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 2, false
	}
	return 0, true
}
