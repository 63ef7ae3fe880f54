package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/atomicfs"
)

// The store stamp lets a start tell a store it can vouch for from one that
// lost files. Pebble opens without complaint over a directory that lost its
// WAL (every record since the last flush gone), whose MANIFEST was cut short
// (later tables dropped), or that was emptied (a fresh store): none of these
// leaves a trace inside the store itself. So a counter lives in two places:
// in the store (synced) and in a file beside it, outside the store's
// directory (Options.StampFile). Each bump writes the store first and the
// file second, so a crash between them leaves the store ahead, never behind.
// A store behind its file lost writes it once acknowledged; a store missing
// while its file is there was lost whole. Both stop the start.
//
// The stamp is bumped at each open, every StampEvery while the store is
// open, and last at Close before the closing flush, so the newest stamp
// rides in the newest WAL or table: a WAL lost whole is noticed unless it
// began less than StampEvery before a crash. A clean Close also lists the
// store's files with their sizes in the stamp file, and the next open
// checks them before Pebble reads any (and then drops the listing, before
// Pebble changes a file): a cleanly closed store copied incompletely (a
// MANIFEST or a table cut short, a file left out) is refused whatever
// Pebble would make of it. After a crash there is no listing, only the
// counter: a MANIFEST cut short then goes unnoticed when the newest stamp
// is in the WAL, which the cut leaves whole.

// ErrStoreLost is returned by Open when the stamp file says the store was
// written before but the store's directory is missing or empty.
var ErrStoreLost = errors.New("store is missing but its stamp file is there")

// ErrStoreBehind is returned by Open when the store's stamp is older than its
// file's: the store lost writes it had acknowledged, or an older copy of it
// was put back without its own stamp file.
var ErrStoreBehind = errors.New("store is older than its stamp file")

// StampFileName is the stamp file's name in a data directory, beside the
// store's directory; backups copy it with the store.
const StampFileName = "store-stamp"

// DefaultStampEvery is how often an open store bumps its stamp.
const DefaultStampEvery = 10 * time.Second

var stampKey = []byte{prefixMeta, 's', 't', 'a', 'm', 'p'}

// stampFileHead starts every stamp file, so a stray file is not read as one.
const stampFileHead = "fraudd store stamp "

// stamp is a stamp file's contents: the counter and, after a clean Close,
// the store's files as it left them.
type stamp struct {
	n     uint64
	files []stampedFile
}

type stampedFile struct {
	name string
	size int64
}

// maxStampFile bounds what is read of a stamp file (a listing of some
// hundred thousand files).
const maxStampFile = 16 << 20

// ReadStampFile reads the stamp file at path; ok is false when there is none.
func ReadStampFile(fs vfs.FS, path string) (n uint64, ok bool, err error) {
	st, ok, err := readStamp(fs, path)
	return st.n, ok, err
}

func readStamp(fs vfs.FS, path string) (stamp, bool, error) {
	f, err := fs.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return stamp{}, false, nil
	}
	if err != nil {
		return stamp{}, false, fmt.Errorf("open stamp file %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStampFile+1))
	if err != nil {
		return stamp{}, false, fmt.Errorf("read stamp file %s: %w", path, err)
	}
	if len(b) > maxStampFile {
		return stamp{}, false, fmt.Errorf("%w: stamp file %s is over %d bytes", ErrCorrupt, path, maxStampFile)
	}
	st, err := parseStamp(b)
	if err != nil {
		return stamp{}, false, fmt.Errorf("%w: stamp file %s: %w", ErrCorrupt, path, err)
	}
	return st, true, nil
}

// parseStamp reads a stamp file's contents: the head and a decimal counter,
// then a line "file NAME SIZE" for each file of a closed store; every line
// ends in a newline.
func parseStamp(b []byte) (stamp, error) {
	s, ok := strings.CutPrefix(string(b), stampFileHead)
	if !ok {
		return stamp{}, errors.New("not a stamp file")
	}
	if !strings.HasSuffix(s, "\n") {
		return stamp{}, errors.New("cut short")
	}
	lines := strings.Split(s[:len(s)-1], "\n")
	n, err := strconv.ParseUint(lines[0], 10, 64)
	if err != nil || n == 0 {
		return stamp{}, fmt.Errorf("bad counter %q", lines[0])
	}
	st := stamp{n: n}
	for _, l := range lines[1:] {
		f := strings.Split(l, " ")
		if len(f) != 3 || f[0] != "file" || !stampableName(f[1]) {
			return stamp{}, fmt.Errorf("bad line %q", l)
		}
		size, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || size < 0 {
			return stamp{}, fmt.Errorf("bad size in %q", l)
		}
		st.files = append(st.files, stampedFile{name: f[1], size: size})
	}
	return st, nil
}

// stampableName: a file name a listing may hold (Pebble's names are plain).
func stampableName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, " /\\\n\x00")
}

func (st stamp) encode() []byte {
	b := []byte(stampFileHead + strconv.FormatUint(st.n, 10) + "\n")
	for _, f := range st.files {
		b = append(b, "file "+f.name+" "+strconv.FormatInt(f.size, 10)+"\n"...)
	}
	return b
}

// WriteStampFile replaces the stamp file at path with n: a temporary file,
// synced, renamed over it, and the directory synced, so a crash leaves the
// old stamp or the new one.
func WriteStampFile(fs vfs.FS, path string, n uint64) error {
	return writeStamp(fs, path, stamp{n: n})
}

func writeStamp(fs vfs.FS, path string, st stamp) error {
	tmp := path + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	_, werr := f.Write(st.encode())
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = fs.Remove(tmp)
		return fmt.Errorf("write %s: %w", tmp, werr)
	}
	if err := fs.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	dir, err := fs.OpenDir(fs.PathDir(path))
	if err != nil {
		return fmt.Errorf("open %s to sync it: %w", fs.PathDir(path), err)
	}
	serr := dir.Sync()
	if cerr := dir.Close(); serr == nil {
		serr = cerr
	}
	if serr != nil {
		return fmt.Errorf("sync %s: %w", fs.PathDir(path), serr)
	}
	return nil
}

// stamper bumps the stamp of an open store; one bump at a time.
type stamper struct {
	path string
	mu   sync.Mutex
	n    uint64 // the last stamp stored, or read at open (under mu)
	stop chan struct{}
	done chan struct{}
}

// checkClosed compares the store's files with the listing a clean Close
// left, before Pebble opens them: each must be there with its size. A store
// whose current MANIFEST is not among them was opened since by something
// that did not stamp it (an earlier release, a tool): the listing no longer
// describes it, and the counter alone is checked.
func checkClosed(fs vfs.FS, dir, path string, st stamp) error {
	if len(st.files) == 0 {
		return nil
	}
	names, err := fs.List(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	listed := func(name string) bool {
		return slices.ContainsFunc(st.files, func(f stampedFile) bool { return f.name == name })
	}
	mixed := func(name string) error {
		return fmt.Errorf("%w: the store in %s holds %s, which its stamp file (%s) does not list: files of another copy of the store were mixed in since it was closed (a backup copied over an existing data directory?): restore the backup into an empty directory (README: Backups and restore)",
			ErrStoreMixed, dir, name, path)
	}
	// Pebble moves its manifest marker by writing the next one and removing
	// the last, so the listed marker beside another one means two stores'
	// files in one directory: a backup copied over the store it was taken
	// from, whose newer marker Pebble would follow (the restore silently not
	// done).
	if slices.ContainsFunc(st.files, func(f stampedFile) bool {
		return strings.HasPrefix(f.name, "marker.manifest.") && slices.Contains(names, f.name)
	}) {
		for _, name := range names {
			if strings.HasPrefix(name, "marker.manifest.") && !listed(name) {
				return mixed(name)
			}
		}
	}
	if cur, err := atomicfs.ReadMarker(fs, dir, "manifest"); err == nil && cur != "" &&
		!slices.ContainsFunc(st.files, func(f stampedFile) bool { return f.name == cur }) {
		return nil
	}
	for _, f := range st.files {
		if strings.HasPrefix(f.name, "marker.manifest.") {
			continue // 0 bytes; a lost one gets ErrManifestMissing's own advice
		}
		info, err := fs.Stat(fs.PathJoin(dir, f.name))
		var now string
		switch {
		case errors.Is(err, os.ErrNotExist):
			now = "gone"
		case err != nil:
			return fmt.Errorf("check the store's %s: %w", f.name, err)
		case info.Size() != f.size:
			now = fmt.Sprintf("%d bytes", info.Size())
		default:
			continue
		}
		return fmt.Errorf("%w: the store in %s is not as it was closed: %s is %s, it was %d bytes, so files were lost or cut short since (an incomplete copy): restore the data directory from a backup, or remove %s to accept the store as it is",
			ErrStoreBehind, dir, f.name, now, f.size, path)
	}
	// A WAL the listing does not name came from another store: a backup
	// copied over the data directory it was taken from leaves the old
	// store's newer WALs beside the backup's files, and Pebble would replay
	// them over the backup's tables. Stray tables and manifests are left
	// alone: Pebble reads only what the current manifest names.
	for _, name := range names {
		if strings.HasSuffix(name, ".log") && !listed(name) {
			return mixed(name)
		}
	}
	return nil
}

// ErrStoreMixed is returned by Open when the store's directory holds a WAL
// that the listing of its clean close (or of the backup it was restored
// from) does not name.
var ErrStoreMixed = errors.New("store holds files of another copy")

// stampClosed writes the stamp file of a store Pebble has closed: its last
// stamp and its files as they are now.
func (d *DB) stampClosed() error {
	d.stamp.mu.Lock()
	defer d.stamp.mu.Unlock()
	if d.stamp.n == 0 {
		return nil // never stamped: the file stays as it was
	}
	files, err := listStore(d.fs, d.dir)
	if err != nil {
		return err
	}
	return writeStamp(d.fs, d.stamp.path, stamp{n: d.stamp.n, files: files})
}

// WriteClosedStampFile writes, at path, the stamp file of a store no process
// has open at dir (a backup's checkpoint): the counter n and the store's
// files as they are now, as a clean Close writes it. The next open checks
// the files against it, so a copy of the backup left incomplete (a WAL or a
// table cut short) is refused, not replayed as a torn tail.
func WriteClosedStampFile(fs vfs.FS, path string, n uint64, dir string) error {
	files, err := listStore(fs, dir)
	if err != nil {
		return err
	}
	return writeStamp(fs, path, stamp{n: n, files: files})
}

// listStore lists the store's files at dir with their sizes.
func listStore(fs vfs.FS, dir string) ([]stampedFile, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var files []stampedFile
	for _, name := range names {
		if name == "LOCK" || !stampableName(name) {
			continue
		}
		info, err := fs.Stat(fs.PathJoin(dir, name))
		if err != nil {
			return nil, fmt.Errorf("stat %s: %w", name, err)
		}
		if info.IsDir() {
			continue
		}
		files = append(files, stampedFile{name: name, size: info.Size()})
	}
	return files, nil
}

// storeStamp reads the stamp in the store, 0 when it has none.
func (d *DB) storeStamp() (uint64, error) {
	v, err := d.get(stampKey)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the store's stamp: %w", err)
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: the store's stamp is %d bytes", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// checkStamp compares the store's stamp with its file's at open, then bumps
// it. file is the file's counter, 0 when there is none.
func (d *DB) checkStamp(file uint64) error {
	have, err := d.storeStamp()
	if err != nil {
		return err
	}
	if have < file {
		return fmt.Errorf("%w: the store in %s is at stamp %d but %s says %d, so it lost writes it had acknowledged (a WAL file or the MANIFEST's tail gone) or an older copy was put back: restore the data directory from a backup (a backup carries its own stamp file), or remove %s to accept the store as it is",
			ErrStoreBehind, d.dir, have, d.stamp.path, file, d.stamp.path)
	}
	d.stamp.mu.Lock()
	d.stamp.n = max(have, file)
	d.stamp.mu.Unlock()
	return d.bumpStamp()
}

// bumpStamp moves the stamp on by one from the last one stored (checkStamp
// set the first): synced into the store, then into the file.
func (d *DB) bumpStamp() error {
	d.stamp.mu.Lock()
	defer d.stamp.mu.Unlock()
	n := d.stamp.n + 1
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], n)
	b := d.newBatch()
	if err := b.Set(stampKey, v[:], nil); err != nil {
		_ = b.Close()
		return fmt.Errorf("stage the store's stamp: %w", err)
	}
	if err := d.commit(b); err != nil {
		return fmt.Errorf("store the stamp: %w", err)
	}
	d.stamp.n = n
	return WriteStampFile(d.fs, d.stamp.path, n)
}

// stampLoop bumps the stamp every period until Close. A failed bump (the
// store unavailable) is logged once per failing spell; the next one retries.
func (d *DB) stampLoop(period time.Duration) {
	defer close(d.stamp.done)
	t := time.NewTicker(period)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-d.stamp.stop:
			return
		case <-t.C:
		}
		err := d.bumpStamp()
		switch {
		case err != nil && !failing:
			d.log.Warn("storage: store stamp not bumped", "err", err)
		case err == nil && failing:
			d.log.Info("storage: store stamp bumped again")
		}
		failing = err != nil
	}
}

// stopStamp ends stampLoop, when one runs.
func (d *DB) stopStamp() {
	if d.stamp.stop == nil {
		return
	}
	close(d.stamp.stop)
	<-d.stamp.done
}
