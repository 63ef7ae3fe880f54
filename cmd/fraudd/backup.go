package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fraudd/fraudd/internal/backup"
	"github.com/fraudd/fraudd/storage"
)

// runBackup is `fraudd backup DIR`: a restorable copy of the data directory
// in DIR (absolute or relative to the current directory; absent or empty).
// When a server runs on the data dir (it holds the store's lock), the
// server writes the backup (POST /admin/v1/backup), so it is taken online.
// When none does, the store is opened here and backed up offline.
func runBackup(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fraudd backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, below
	dataDir := "./data"
	fs.Var(dirValue{&dataDir}, "data-dir", "data directory to back up")
	base := new(string)
	*base = localAdminURL(osEnv())
	fs.Var(serverURL{base}, "url", "the server running on the data dir")
	var token string
	fs.Var(tokenValue{&token}, "admin-token", "operator token, surrounding whitespace trimmed; default <data-dir>/admin-token")
	if err := parseFlagsEnv(fs, args, osEnv()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// Asked for: on stdout, as serve's and admin's help are.
			fmt.Fprint(stdout, "usage: fraudd backup [flags] DIR\n\nWrites the store and the secret files into DIR (absent or empty).\nRestore: stop fraudd, move the data directory aside, copy DIR into its place\n(cp -a DIR DATA-DIR, DATA-DIR absent) and start fraudd (README: Backups and restore).\n\nflags:\n")
			printFlags(stdout, fs, true)
			return 0
		}
		fmt.Fprintf(stderr, "fraudd backup: %v\n", err)
		return 2
	}
	// A wrong count printed the usage alone, exit 2, without saying what
	// was wrong: a flag after DIR (`fraudd backup DIR --data-dir D`, the
	// order the admin commands take) is not parsed, and read as a second
	// argument, the backup of ./data silently not taken.
	if fs.NArg() != 1 {
		switch {
		case fs.NArg() == 0:
			fmt.Fprintln(stderr, "fraudd backup: want one argument, DIR: the directory to write the backup into (absent or empty)")
		case strings.HasPrefix(fs.Arg(1), "-"):
			fmt.Fprintf(stderr, "fraudd backup: %q after DIR: flags go before it (fraudd backup [flags] DIR)\n", fs.Arg(1))
		default:
			fmt.Fprintf(stderr, "fraudd backup: unexpected argument %q (want one, DIR)\n", fs.Arg(1))
		}
		fmt.Fprintln(stderr, "Run 'fraudd backup -h' for the flags.")
		return 2
	}
	// Checked as given: filepath.Abs would keep a trailing blank but
	// bury a leading one inside the path.
	if err := checkDirPath(fs.Arg(0)); err != nil {
		fmt.Fprintf(stderr, "fraudd backup: DIR %q is not valid (%v): a blank or newline kept from a file names another directory\n", fs.Arg(0), err)
		return 2
	}
	dir, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "fraudd backup: %v\n", err)
		return 2
	}
	restrictUmask()
	rep, err := backupOffline(dataDir, dir)
	switch {
	case errors.Is(err, errServerRunning):
		rep, err = backupOnline(*base, token, dataDir, dir)
	case errors.Is(err, errNoStore):
		// No store here: the server may run elsewhere. If none answers
		// either, the likelier cause is a --data-dir that names no data
		// dir (a typo), which the online attempt's own error ("cannot
		// read DIR/admin-token", "connection refused") did not say.
		if rep, err = backupOnline(*base, token, dataDir, dir); err != nil {
			err = fmt.Errorf("--data-dir %s holds no store (%s), and no server took the backup either: %w", dataDir, filepath.Join(dataDir, backup.StoreDir), err)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "fraudd backup: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "backup written to %s: %s\n", rep.Dir, strings.Join(rep.Files, ", "))
	for _, n := range rep.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	return 0
}

var (
	errServerRunning = errors.New("a server runs on the data dir")
	errNoStore       = errors.New("no store in the data dir")
)

// backupOffline backs the data dir up from here, unless a server holds its
// store (errServerRunning) or there is no store there (errNoStore: the
// server may run elsewhere).
func backupOffline(dataDir, dir string) (*backup.Report, error) {
	store := filepath.Join(dataDir, backup.StoreDir)
	if _, err := os.Stat(store); os.IsNotExist(err) {
		return nil, errNoStore
	}
	// A backup of an unfinished backup would not carry its mark.
	if err := backup.CheckFinished(dataDir); err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The store must be there already (a lost one is not made anew here,
	// which would hide the loss from the next start), and is checked and
	// stamped as a start checks it.
	db, err := storage.Open(store, storage.Options{Logger: quiet, MustExist: true,
		StampFile: filepath.Join(dataDir, storage.StampFileName)})
	if errors.Is(err, storage.ErrLocked) {
		return nil, errServerRunning
	}
	if err != nil {
		return nil, err
	}
	rep, err := backup.Write(backup.Source{DataDir: dataDir, Store: db}, dir)
	if cerr := db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close the store: %w", cerr)
	}
	return rep, err
}

// backupOnline asks the server to write the backup.
func backupOnline(base, token, dataDir, dir string) (*backup.Report, error) {
	tok, err := adminToken(token, dataDir)
	if err != nil {
		return nil, err
	}
	payload, _ := json.Marshal(map[string]string{"dir": dir})
	// A backup onto another filesystem copies every table: no short timeout.
	status, out, err := callAdmin(base, tok, "POST", "/admin/v1/backup", payload, 6*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("ask the server at %s: %w", base, err)
	}
	if noAdminAPI(status, out) {
		return nil, errors.New(noAdminAPIHint(base))
	}
	if status != 200 {
		// One line, as the admin commands report a refusal: the JSON
		// body was printed indented over several.
		return nil, fmt.Errorf("server at %s: %s", base, errorLine(status, out))
	}
	var r struct {
		Dir   string   `json:"dir"`
		Files []string `json:"files"`
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("server answer: %w", err)
	}
	return &backup.Report{Dir: r.Dir, Files: r.Files, Notes: r.Notes}, nil
}
