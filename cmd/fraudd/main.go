// Command fraudd is the fraud detection service: `fraudd serve` runs it,
// `fraudd admin …` drives its operator API, `fraudd feeds …` builds and
// refreshes the intelligence feeds, `fraudd backup DIR` backs the data
// directory up.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		// The one-command start: `fraudd` alone serves on its defaults.
		return runServe(nil, stdout, stderr)
	}
	switch args[0] {
	case "serve":
		return runServe(args[1:], stdout, stderr)
	case "admin":
		return runAdmin(args[1:], stdout, stderr)
	case "feeds":
		return runFeeds(args[1:], stdout, stderr)
	case "backup":
		return runBackup(args[1:], stdout, stderr)
	case "health":
		return runHealth(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		// It takes nothing: a flag after it (`fraudd version --json`) was
		// ignored and answered as if understood, exit 0, where every other
		// command refuses what it does not know.
		if len(args) > 1 {
			fmt.Fprintf(stderr, "fraudd version: unexpected argument %q (it takes none)\n", args[1])
			return 2
		}
		fmt.Fprintln(stdout, version)
		return 0
	case "help", "-h", "--help", "-help":
		usage(stdout)
		return 0
	default:
		if strings.HasPrefix(args[0], "-") {
			// Flags without a command are serve's, as usage says:
			// `fraudd --addr :9000` is `fraudd serve --addr :9000`.
			return runServe(args, stdout, stderr)
		}
		fmt.Fprintf(stderr, "fraudd: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: fraudd [<command>] [flags]

commands:
  serve    run the service (the default when no command is given:
           'fraudd --addr :9000' is 'fraudd serve --addr :9000')
  admin    call the operator API (create-account, rotate-live, set-rules, …)
  feeds    build, update and inspect the intelligence feeds
  backup   copy the store and secrets into a directory (online when a server runs)
  health   probe a running server's /readyz (exit 0 when ready; for HEALTHCHECK)
  version  print the version

Run 'fraudd <command> -h' for a command's flags.
`)
}
