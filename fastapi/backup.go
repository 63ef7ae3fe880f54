package fastapi

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/internal/backup"
	"github.com/fraudd/fraudd/wire"
)

// adminBackup is POST /admin/v1/backup {"dir": "/abs/path"}: an online
// backup of the data directory into dir, which must be absolute, outside
// the data directory, and absent or empty (409 otherwise). It answers when
// the copy is complete and synced.
func (s *Server) adminBackup(ctx *fasthttp.RequestCtx, r *request) {
	if s.deps.Backup == nil {
		s.writeError(ctx, fasthttp.StatusNotFound, checks.MsgNotFound, "", "")
		return
	}
	var in struct {
		Dir string `json:"dir"`
	}
	if err := decodeStrict(ctx.PostBody(), &in); err != nil {
		s.badRequest(ctx, "Invalid JSON body: %v.", err)
		return
	}
	if in.Dir == "" {
		s.badRequest(ctx, checks.MsgBackupNoDir)
		return
	}
	rep, err := s.deps.Backup(in.Dir)
	switch {
	case errors.Is(err, backup.ErrInvalid):
		s.badRequest(ctx, checks.MsgBackupDir, err)
		return
	case errors.Is(err, backup.ErrExists):
		s.writeError(ctx, fasthttp.StatusConflict, checks.MsgBackupExists, "", "")
		return
	case errors.Is(err, backup.ErrTargetFull):
		s.log.Warn("backup refused: its directory's file system is full", "err", err)
		s.writeError(ctx, fasthttp.StatusInsufficientStorage, checks.MsgBackupFull, "", "")
		return
	case errors.Is(err, backup.ErrStoreUnavailable):
		s.storageUnavailable(ctx)
		return
	case err != nil:
		s.serverError(ctx, "backup", err)
		return
	}
	s.log.Info("backup written", "dir", rep.Dir, "files", rep.Files)
	out := &wire.Backup{Dir: rep.Dir, Files: rep.Files, Notes: rep.Notes}
	if out.Notes == nil {
		out.Notes = []string{}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, out)
}
