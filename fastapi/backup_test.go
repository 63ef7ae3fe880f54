package fastapi

import (
	"fmt"
	"path"
	"syscall"
	"testing"

	"github.com/fraudd/fraudd/internal/backup"
)

// fakeBackup stands in for backup.Write in the handler scripts
// (testdata/handlers/backup): the directory's name picks the outcome.
func fakeBackup(dir string) (*backup.Report, error) {
	switch {
	case !path.IsAbs(dir):
		return nil, fmt.Errorf("%w: %q is not an absolute path", backup.ErrInvalid, dir)
	case path.Base(dir) == "full":
		return nil, fmt.Errorf("%w: %s", backup.ErrExists, dir)
	case path.Base(dir) == "nospace":
		return nil, fmt.Errorf("%w (%s): write: %w", backup.ErrTargetFull, dir, syscall.ENOSPC)
	case path.Base(dir) == "down":
		return nil, fmt.Errorf("%w: checkpoint", backup.ErrStoreUnavailable)
	}
	return &backup.Report{Dir: dir, Files: []string{"pebble/", "master-secret", "admin-token"}}, nil
}

// TestAdminBackupOff: a server without a backup function has no backup
// route to offer.
func TestAdminBackupOff(t *testing.T) {
	e := newTestEnv(t)
	if ctx := e.do("POST", "/admin/v1/backup", "Bearer adm", []byte(`{"dir":"/srv/backups/x"}`)); ctx.Response.StatusCode() != 404 {
		t.Fatalf("without a backup function: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}
