package backup

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
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
