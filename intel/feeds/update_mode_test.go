//go:build unix

package feeds

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// TestUpdateKeepsTheDataDirPrivate: what Update creates in the data dir is
// the operator's alone, whatever the umask: the data dir and feeds/ 0700,
// the feed files 0600 (they were 0755 and 0644, and the next `fraudd serve`
// warned of a data dir others could read).
func TestUpdateKeepsTheDataDirPrivate(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	emb, err := netlists.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, map[string]string{
		"/monosans": manyAddrs(1000, "http://", ":8080"),
		"/iplocate": manyAddrs(500, "socks5://", ":1080"),
	})
	sources := []Source{
		{Feed: FeedProxy, URL: up.URL + "/monosans", Format: FormatProxyLines},
		{Feed: FeedProxy, URL: up.URL + "/iplocate", Format: FormatProxyLines},
	}
	data := filepath.Join(t.TempDir(), "data")
	rep, err := Update(context.Background(), up.Client(), sources, data, emb)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Updated() != 1 {
		t.Fatalf("report %+v", rep)
	}
	for path, want := range map[string]os.FileMode{
		data: 0o700,
		filepath.Join(data, netlists.FeedsSubdir):                         0o700,
		filepath.Join(data, netlists.FeedsSubdir, FeedProxy+feedfile.Ext): 0o600,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
	}
}
