package backup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// fakeStore writes one file where the checkpoint goes, or fails.
type fakeStore struct{ fail bool }

func (f fakeStore) Checkpoint(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "MANIFEST-000001"), []byte("m"), 0o644); err != nil {
		return err
	}
	if f.fail {
		return errors.New("disk full")
	}
	return nil
}

func dataDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "master-secret"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "admin-token"), []byte("adm_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestWriteCopiesStoreAndSecrets(t *testing.T) {
	data := dataDir(t)
	dir := filepath.Join(t.TempDir(), "b1")
	rep, err := Write(Source{DataDir: data, Store: fakeStore{}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Files, []string{"pebble/", "master-secret", "admin-token"}) || len(rep.Notes) != 0 {
		t.Fatalf("report %+v", rep)
	}
	for name, want := range map[string]os.FileMode{"": 0o700, "pebble": 0o700, "pebble/MANIFEST-000001": 0o600, "master-secret": 0o600, "admin-token": 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %04o", name, st.Mode(), err, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "master-secret")); string(b) != "s3cret\n" {
		t.Fatalf("secret copied as %q", b)
	}
	// An existing empty directory is fine; a non-empty one is refused.
	empty := t.TempDir()
	if _, err := Write(Source{DataDir: data, Store: fakeStore{}}, empty); err != nil {
		t.Fatalf("empty target: %v", err)
	}
	if _, err := Write(Source{DataDir: data, Store: fakeStore{}}, dir); !errors.Is(err, ErrExists) {
		t.Fatalf("non-empty target: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "master-secret")); string(b) != "s3cret\n" {
		t.Fatal("a refused backup touched the existing one")
	}
}

func TestWriteRefusesBadTargets(t *testing.T) {
	data := dataDir(t)
	for _, dir := range []string{"relative/dir", data, filepath.Join(data, "inside")} {
		if _, err := Write(Source{DataDir: data, Store: fakeStore{}}, dir); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", dir, err)
		}
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o600)
	if _, err := Write(Source{DataDir: data, Store: fakeStore{}}, file); !errors.Is(err, ErrInvalid) {
		t.Errorf("a file as target: %v", err)
	}
}

func TestFailedBackupLeavesNothing(t *testing.T) {
	data := dataDir(t)
	dir := filepath.Join(t.TempDir(), "b")
	if _, err := Write(Source{DataDir: data, Store: fakeStore{fail: true}}, dir); err == nil {
		t.Fatal("failed checkpoint reported success")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("failed backup left %s: %v", dir, err)
	}
	empty := t.TempDir()
	if _, err := Write(Source{DataDir: data, Store: fakeStore{fail: true}}, empty); err == nil {
		t.Fatal("failed checkpoint reported success")
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Fatalf("failed backup left %v in the target", entries)
	}
}

func TestSecretFromFlagIsNoted(t *testing.T) {
	data := t.TempDir()
	rep, err := Write(Source{DataDir: data, Store: fakeStore{}, SecretOutside: true}, filepath.Join(t.TempDir(), "b"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Files, []string{"pebble/"}) || len(rep.Notes) != 1 {
		t.Fatalf("report %+v", rep)
	}
}

// blockingStore holds its checkpoint until released, after signalling that
// it has begun (a live store first waits for its write-behind owners).
type blockingStore struct {
	started chan struct{}
	release chan struct{}
}

func (b blockingStore) Checkpoint(dir string) error {
	close(b.started)
	<-b.release
	return fakeStore{}.Checkpoint(dir)
}

// TestConcurrentBackupsIntoOneDir: two backups into the same directory at
// once (two operator requests) leave one complete backup; the one refused
// never removes what the other wrote.
func TestConcurrentBackupsIntoOneDir(t *testing.T) {
	data := dataDir(t)
	dir := filepath.Join(t.TempDir(), "b")
	first := blockingStore{started: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := Write(Source{DataDir: data, Store: first}, dir)
		done <- err
	}()
	<-first.started
	// The first backup has created dir and is checkpointing into it.
	second := make(chan error, 1)
	go func() {
		_, err := Write(Source{DataDir: data, Store: fakeStore{}}, dir)
		second <- err
	}()
	var errSecond error
	secondDone := false
	select {
	case errSecond = <-second: // it did not wait for the first
		secondDone = true
	case <-time.After(100 * time.Millisecond):
	}
	close(first.release)
	errFirst := <-done
	if !secondDone {
		errSecond = <-second
	}
	if (errFirst == nil) == (errSecond == nil) {
		t.Fatalf("first %v, second %v: want exactly one to succeed", errFirst, errSecond)
	}
	for _, name := range []string{"pebble/MANIFEST-000001", "master-secret", "admin-token"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("the successful backup lost %s: %v", name, err)
		}
	}
}

// stampingStore moves the data dir's stamp on as its checkpoint runs, as the
// store's own stamp loop may.
type stampingStore struct {
	fakeStore
	file string
}

func (s stampingStore) Checkpoint(dir string) error {
	if err := storage.WriteStampFile(vfs.Default, s.file, 9); err != nil {
		return err
	}
	return s.fakeStore.Checkpoint(dir)
}

// TestWriteCopiesTheStampReadBeforeTheCheckpoint: the backup carries the
// store's stamp file as it was before the checkpoint began, so the store in
// the backup is never behind the stamp beside it.
func TestWriteCopiesTheStampReadBeforeTheCheckpoint(t *testing.T) {
	data := dataDir(t)
	file := filepath.Join(data, storage.StampFileName)
	if err := storage.WriteStampFile(vfs.Default, file, 8); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "b")
	rep, err := Write(Source{DataDir: data, Store: stampingStore{file: file}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rep.Files, storage.StampFileName) {
		t.Fatalf("report %+v", rep)
	}
	n, ok, err := storage.ReadStampFile(vfs.Default, filepath.Join(dir, storage.StampFileName))
	if err != nil || !ok || n != 8 {
		t.Fatalf("backup's stamp %d %v %v, want 8", n, ok, err)
	}
	if st, err := os.Stat(filepath.Join(dir, storage.StampFileName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stamp file mode %v %v", st.Mode(), err)
	}
}

// noSpaceStore fails its checkpoint as a full file system does.
type noSpaceStore struct{}

func (noSpaceStore) Checkpoint(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	return &os.PathError{Op: "write", Path: filepath.Join(dir, "000004.sst"), Err: syscall.ENOSPC}
}

// TestFullTargetIsNamed: a backup that runs out of space says so (the
// handler answers 507 with it, the command prints it), and leaves nothing.
func TestFullTargetIsNamed(t *testing.T) {
	data := dataDir(t)
	dir := filepath.Join(t.TempDir(), "b")
	_, err := Write(Source{DataDir: data, Store: noSpaceStore{}}, dir)
	if !errors.Is(err, ErrTargetFull) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("err = %v, want ErrTargetFull naming %s", err, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the failed backup's directory is left: %v", err)
	}
}

// TestUnwritableTargetIsInvalid: a directory the server may not create is
// the operator's choice to correct (400), not a server failure.
func TestUnwritableTargetIsInvalid(t *testing.T) {
	probe := "/sys/fraudd-backup-probe"
	if err := os.Mkdir(probe, 0o700); err == nil {
		os.Remove(probe)
		t.Skip("/sys is writable here; no unwritable place to name")
	} else if !errors.Is(err, fs.ErrPermission) {
		t.Skipf("/sys refuses with %v here, not a permission error", err)
	}
	_, err := Write(Source{DataDir: dataDir(t), Store: fakeStore{}}, "/sys/fraudd-backup/b")
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("err = %v, want ErrInvalid with the permission error", err)
	}
}

// TestWriteRefusesABlankOrNewlineInTheTarget: a target with surrounding
// whitespace or a control character (a newline kept from a script or a
// file) was written as named, a directory beside the one the operator
// will look in at restore time; it is refused as --data-dir is, and
// nothing is created.
func TestWriteRefusesABlankOrNewlineInTheTarget(t *testing.T) {
	data := dataDir(t)
	base := t.TempDir()
	for _, name := range []string{"b ", "b\n", "b\tc"} {
		dir := base + "/" + name
		_, err := Write(Source{DataDir: data, Store: fakeStore{}}, dir)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "surrounding whitespace or a control character") {
			t.Errorf("%q: %v, want ErrInvalid naming it", dir, err)
		}
	}
	if entries, _ := os.ReadDir(base); len(entries) != 0 {
		t.Errorf("created %d entries", len(entries))
	}
}

// killedStore is a store whose Checkpoint takes an image of the backup
// directory as a kill -9 at that moment would leave it (the checkpoint's
// own files not yet written).
type killedStore struct{ dir, image string }

func (k *killedStore) Checkpoint(dir string) error {
	if err := os.CopyFS(k.image, os.DirFS(k.dir)); err != nil {
		return err
	}
	return fakeStore{}.Checkpoint(dir)
}

// TestKilledBackupIsMarkedUnfinished: a backup killed midway (here: during
// the checkpoint, the WAL or the secrets not yet copied) leaves a directory
// that CheckFinished, and so a start on it (a restore), refuses; a backup
// that finished carries no mark. Before, a backup killed after its
// checkpoint's manifest but before its WAL started as an empty store, with
// a new master secret, without a word.
func TestKilledBackupIsMarkedUnfinished(t *testing.T) {
	data := dataDir(t)
	dir := filepath.Join(t.TempDir(), "b")
	k := &killedStore{dir: dir, image: filepath.Join(t.TempDir(), "image")}
	if _, err := Write(Source{DataDir: data, Store: k}, dir); err != nil {
		t.Fatal(err)
	}
	if err := CheckFinished(k.image); !errors.Is(err, ErrUnfinished) || !strings.Contains(err.Error(), k.image) || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("the directory a kill during the checkpoint leaves: %v, want ErrUnfinished naming it", err)
	}
	if err := CheckFinished(dir); err != nil {
		t.Fatalf("the finished backup: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, UnfinishedFile)); !os.IsNotExist(err) {
		t.Fatalf("the finished backup still holds %s: %v", UnfinishedFile, err)
	}
	if err := CheckFinished(data); err != nil {
		t.Fatalf("a data dir: %v", err)
	}
}

// TestTargetUnderAFileIsInvalid: a path whose parent is a file (a typo, a
// file where a directory was meant) can never hold a backup: the operator's
// to correct (400), not a server failure (500), whether the stat or the
// mkdir meets the file.
func TestTargetUnderAFileIsInvalid(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(file, "b"), filepath.Join(file, "b", "c")} {
		_, err := Write(Source{DataDir: dataDir(t), Store: fakeStore{}}, dir)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", dir, err)
		}
	}
}
