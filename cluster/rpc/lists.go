package rpc

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/storage"
)

// The operator lists each node keeps of what it handled itself: an
// account's recent evaluations (those it answered), its webhook deliveries
// (the attempts it made) and the mail outbox (what it sent). In a cluster
// the admin list on any node is every member's, merged: this node's own
// part plus one call to each other live member (RecentEvaluations,
// Deliveries, Mail), in parallel within the client's Timeout, as Days
// sums the daily counts. Each member answers at most the list's limit of
// its newest lines, so the merged list's newest limit lines are among
// them. A member that does not answer (down, partitioned, or of an older
// build, which answers Unimplemented) is left out and logged, as for
// Days: the list shows the others' part until it answers again.

// LocalEvaluations is the node's own recent evaluations (*recent.Client).
type LocalEvaluations interface {
	List(recent.List) ([]*recent.Evaluation, error)
}

// LocalDeliveries is the node's own webhook delivery log
// (*webhook.Service).
type LocalDeliveries interface {
	Recent(account string, now time.Time) ([]*storage.Delivery, error)
}

// LocalMail is the node's own outbox (*mailer.Mailer).
type LocalMail interface {
	Recent(limit int) ([]*storage.Mail, error)
	RecentOf(account string, limit int) ([]*storage.Mail, error)
}

// LocalLists are the node's own operator lists, answered to the other
// members (Server.ServeLists) and merged with theirs (Quota.EvaluationList
// and its neighbours). A nil part answers Unavailable.
type LocalLists struct {
	Evaluations LocalEvaluations
	Deliveries  LocalDeliveries
	Mail        LocalMail
}

// ServeLists has the server answer the other members' list calls from l.
// The lists' actors start after the node-to-node service (serve wires
// them in later), so they are attached, not configured; until then the
// calls answer Unavailable and the asking node leaves this part out.
func (s *Server) ServeLists(l LocalLists) { s.lists.Store(&l) }

// listsOf is the attached lists; ok is false before ServeLists.
func (s *Server) listsOf() (LocalLists, bool) {
	l := s.lists.Load()
	if l == nil {
		return LocalLists{}, false
	}
	return *l, true
}

// listRequestOf checks a list request: a version, a limit in 1..most, an
// account (of at most maxObsAccountID bytes; required unless anyAccount)
// and, with needNow, the asker's clock.
func listRequestOf(r *ListRequest, most int, anyAccount, needNow bool) error {
	if r.GetVersion() == 0 || r.GetLimit() <= 0 || r.GetLimit() > int64(most) || len(r.GetAccount()) > maxObsAccountID ||
		(r.GetAccount() == "" && !anyAccount) || (needNow && r.GetNowUnixNano() <= 0) {
		return status.Error(codes.InvalidArgument, fmt.Sprintf("%v: list of %q, %d lines", errBadRequest, r.GetAccount(), r.GetLimit()))
	}
	return nil
}

// gather asks every other live member for its part of a list with ask,
// within the client's Timeout, and returns every part that came with own
// (this node's), ordered by member id so that lines that tie merge in the
// same order on every node. The members that did not answer are logged
// and left out.
func gather[T any](q *Quota, list, account string, own []T, ask func(ctx context.Context, cli NodeClient, id string) ([]T, error)) [][]T {
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.Timeout)
	defer cancel()
	byNode := map[string][]T{q.cfg.Owners.Self(): own}
	eachOther(q, func(id string) ([]T, error) {
		p, err := q.peer(id)
		if err != nil {
			return nil, err
		}
		return ask(ctx, p.cli, id)
	}, func(id string, got []T, err error) {
		switch {
		case status.Code(err) == codes.Unimplemented:
			q.log.Warn("cluster: a member of an older build cannot list its part; it is left out", "list", list, "member", id, "account", account)
		case err != nil:
			q.log.Warn("cluster: a member's part of a list is missing", "list", list, "member", id, "account", account, "err", err)
		default:
			byNode[id] = got
		}
	})
	ids := make([]string, 0, len(byNode))
	for id := range byNode {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parts := make([][]T, len(ids))
	for i, id := range ids {
		parts[i] = byNode[id]
	}
	return parts
}

// mergeNewest merges parts, each newest first, into one list newest first
// of at most limit lines. The sort is stable: lines that tie keep their
// member's order, and the order of the parts between members.
func mergeNewest[T any](parts [][]T, limit int, newer func(a, b T) int) []T {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	all := make([]T, 0, n)
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortStableFunc(all, newer)
	return all[:min(len(all), limit)]
}

// checkNode checks that a reply names the member asked.
func checkNode(got, id, list string) error {
	if got != id {
		return fmt.Errorf("member %s answered its %s as %q: %w", id, list, got, errBadRequest)
	}
	return nil
}

// Bounds of the list replies. A member answers at most the list's limit
// of lines; their fields are what this service writes itself (ids,
// decisions, addresses, the webhook URL, an error, a mail's text), short
// in practice. The answering member cuts a field past its bound and the
// asking one refuses a reply with one, so that a reply stays well under
// gRPC's 4 MiB message limit: 200 mails of at most 8 KiB of body and
// at most 4 KiB of the other fields are 2.4 MiB.
const (
	maxMailLines = 200     // the admin outbox's most (GET /admin/v1/mail)
	maxListWord  = 256     // an id, a kind, a decision, a status, an address
	maxListText  = 1 << 10 // a URL, an error, a recipient, a subject
	maxListBody  = 8 << 10 // a mail's body
	maxListWords = 64      // an evaluation's rules matched, its reasons
)

// clip cuts s to at most n bytes, at a rune boundary (a proto string must
// be valid UTF-8).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// clipWords is clip for each of at most maxListWords words.
func clipWords(ws []string) []string {
	ws = ws[:min(len(ws), maxListWords)]
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = clip(w, maxListWord)
	}
	return out
}

// wordsOK says whether ws keeps the bounds clipWords sets.
func wordsOK(ws []string) bool {
	if len(ws) > maxListWords {
		return false
	}
	for _, w := range ws {
		if len(w) > maxListWord {
			return false
		}
	}
	return true
}

func unavailable(msg string) error { return status.Error(codes.Unavailable, "cluster rpc: "+msg) }
