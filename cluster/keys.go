package cluster

import (
	"errors"
	"fmt"
	"strings"
)

// Kind names a shard space.
type Kind string

// The shard spaces. Their sizes are fixed for the life of a cluster: they
// are part of the key space.
const (
	KindAccount Kind = "account"
	KindAddr    Kind = "addr"

	AccountShards = 1024
	AddrShards    = 256
)

// Shards is the number of shards of kind k, 0 for an unknown kind.
func Shards(k Kind) int {
	switch k {
	case KindAccount:
		return AccountShards
	case KindAddr:
		return AddrShards
	}
	return 0
}

// ShardOf maps a key (an account id, a source address key) to its shard:
// FNV-1a, written out so that the per-request lookup allocates nothing.
func ShardOf(k Kind, key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(Shards(k)))
}

// viewKeys are the owner view's keys (<kind>/<shard>) of every shard,
// built once: Owner runs per request.
var viewKeys = map[Kind][]string{KindAccount: shardKeys(KindAccount), KindAddr: shardKeys(KindAddr)}

func shardKeys(k Kind) []string {
	out := make([]string, Shards(k))
	for s := range out {
		out[s] = fmt.Sprintf("%s/%04d", k, s)
	}
	return out
}

func viewKey(k Kind, shard int) string {
	if ks := viewKeys[k]; shard >= 0 && shard < len(ks) {
		return ks[shard]
	}
	return fmt.Sprintf("%s/%04d", k, shard)
}

// Root is the key prefix of a cluster: /fraudd/<name>/.
func Root(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/ \t\n") {
		return "", fmt.Errorf("cluster name %q: want a non-empty name without slashes or spaces", name)
	}
	return "/fraudd/" + name + "/", nil
}

func membersPrefix(root string) string { return root + "members/" }

// nodesPrefix holds a record per node that may hold a share of the counts
// (nodes/<id>, no lease): written with each registration, deleted when a
// graceful leave handed the node's shares over (Member.Retire).
func nodesPrefix(root string) string { return root + "nodes/" }

func ownersPrefix(root string, k Kind) string { return root + "owners/" + string(k) + "/" }

func ownerKey(root string, k Kind, shard int) string {
	return fmt.Sprintf("%s%04d", ownersPrefix(root, k), shard)
}

// ConfigPrefix is where the account configuration of a cluster lives.
func ConfigPrefix(root string) string { return root + "config/" }

func parseShard(suffix string, k Kind) (int, error) {
	if len(suffix) != 4 {
		return 0, errors.New("shard key: want four digits")
	}
	n := 0
	for _, c := range suffix {
		if c < '0' || c > '9' {
			return 0, errors.New("shard key: want four digits")
		}
		n = n*10 + int(c-'0')
	}
	if n >= Shards(k) {
		return 0, fmt.Errorf("shard key: %d out of range for %s", n, k)
	}
	return n, nil
}
