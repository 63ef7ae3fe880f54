package accounts

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// goneShared is a shared store whose writes succeed while the account they
// wrote is gone from this node's copy by the time the writer reads it back:
// another member deleted it, and the delete was installed first.
type goneShared struct{}

func (goneShared) Create(*storage.Account) error { return nil }
func (goneShared) Modify(string, func(*Records) error) error {
	return nil
}

// TestWriteToADeletedAccountIsNotFound: a write whose account another
// member deleted meanwhile answers ErrNotFound (the admin API's 404), never
// a nil view with no error (a nil dereference in the handler).
func TestWriteToADeletedAccountIsNotFound(t *testing.T) {
	s, db := start(t, vfs.NewMem(), clock.NewOffset())
	defer func() { s.Stop(); db.Close() }()
	s.cfg.Shared = goneShared{}
	for name, write := range map[string]func() (*View, error){
		"rules":   func() (*View, error) { return s.SetRules("acc_gone", nil) },
		"pins":    func() (*View, error) { return s.SetPins("acc_gone", nil) },
		"webhook": func() (*View, error) { return s.SetWebhookURL("acc_gone", "https://example.com/h") },
		"update":  func() (*View, error) { return s.Update("acc_gone", Patch{}) },
	} {
		if v, err := write(); v != nil || !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, %v; want ErrNotFound", name, v, err)
		}
	}
}
