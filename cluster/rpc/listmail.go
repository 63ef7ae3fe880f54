package rpc

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/fraudd/fraudd/storage"
)

// MailList is the mail outbox in a cluster (GET /admin/v1/mail): each node
// records the mail it sends (the usage warnings of the accounts it owns,
// the webhook failure notices of the deliveries it makes); the outbox is
// every member's, merged (lists.go).
type MailList struct {
	q     *Quota
	local LocalMail
}

// MailList returns the merged outbox over this node's own.
func (q *Quota) MailList(local LocalMail) *MailList { return &MailList{q: q, local: local} }

// Recent is mailer.Mailer.Recent over the cluster: the limit newest
// records, newest first, whichever member sent them.
func (m *MailList) Recent(limit int) ([]*storage.Mail, error) {
	return m.list("", limit, func() ([]*storage.Mail, error) { return m.local.Recent(limit) })
}

// RecentOf is mailer.Mailer.RecentOf over the cluster: one account's limit
// newest records, however many of other accounts' are newer.
func (m *MailList) RecentOf(account string, limit int) ([]*storage.Mail, error) {
	if account == "" {
		return nil, nil // as the store answers
	}
	return m.list(account, limit, func() ([]*storage.Mail, error) { return m.local.RecentOf(account, limit) })
}

func (m *MailList) list(account string, limit int, local func() ([]*storage.Mail, error)) ([]*storage.Mail, error) {
	own, err := local()
	if err != nil || limit <= 0 {
		return own, err
	}
	limit = min(limit, maxMailLines)
	parts := gather(m.q, "mail", account, own, func(ctx context.Context, cli NodeClient, id string) ([]*storage.Mail, error) {
		r, err := cli.Mail(ctx, &ListRequest{Version: version, Account: account, Limit: int64(limit)})
		if err != nil {
			return nil, err
		}
		return mailOf(r, id, account, limit)
	})
	return mergeNewest(parts, limit, newerMail), nil
}

// newerMail orders as the store's key does, newest first: the time, then
// the id.
func newerMail(a, b *storage.Mail) int {
	if c := b.At.Compare(a.At); c != 0 {
		return c
	}
	return cmp.Compare(b.ID, a.ID)
}

// Mail implements NodeServer: this node's own outbox, of one account or
// of all.
func (s *Server) Mail(_ context.Context, r *ListRequest) (*MailReply, error) {
	if err := listRequestOf(r, maxMailLines, true, false); err != nil {
		return nil, err
	}
	l, ok := s.listsOf()
	if !ok || l.Mail == nil {
		return nil, unavailable("this node keeps no outbox")
	}
	var list []*storage.Mail
	var err error
	if r.Account == "" {
		list, err = l.Mail.Recent(int(r.Limit))
	} else {
		list, err = l.Mail.RecentOf(r.Account, int(r.Limit))
	}
	if err != nil {
		return nil, unavailable(fmt.Sprintf("mail of %q: %v", r.Account, err))
	}
	rep := &MailReply{Version: version, Node: s.cfg.Owners.Self(), Mail: make([]*MailLine, 0, min(len(list), int(r.Limit)))}
	for _, m := range list[:min(len(list), int(r.Limit))] {
		rep.Mail = append(rep.Mail, &MailLine{Id: clip(m.ID, maxListWord), AtUnixNano: unixNano(m.At), Account: clip(m.Account, maxListWord),
			To: clip(m.To, maxListText), Kind: clip(m.Kind, maxListWord), Subject: clip(m.Subject, maxListText), Body: clip(m.Body, maxListBody),
			Status: clip(m.Status, maxListWord), Error: clip(m.Error, maxListText)})
	}
	return rep, nil
}

// mailOf checks and converts a member's part: its own, at most limit
// records, newest first, of account alone when one was asked for, within
// the bounds the server keeps (lists.go).
func mailOf(r *MailReply, id, account string, limit int) ([]*storage.Mail, error) {
	if err := checkNode(r.GetNode(), id, "mail"); err != nil {
		return nil, err
	}
	if len(r.GetMail()) > limit {
		return nil, fmt.Errorf("member %s answered %d mails for at most %d: %w", id, len(r.Mail), limit, errBadRequest)
	}
	out := make([]*storage.Mail, len(r.Mail))
	var last time.Time
	for i, m := range r.Mail {
		at := fromUnixNano(m.GetAtUnixNano())
		if m == nil || m.AtUnixNano <= 0 || (i > 0 && at.After(last)) || (account != "" && m.Account != account) ||
			!wordsOK([]string{m.Id, m.Account, m.Kind, m.Status}) || len(m.To) > maxListText || len(m.Subject) > maxListText ||
			len(m.Body) > maxListBody || len(m.Error) > maxListText {
			return nil, fmt.Errorf("member %s answered mail %d out of order or out of bounds: %w", id, i, errBadRequest)
		}
		last = at
		out[i] = &storage.Mail{ID: m.Id, At: at, Account: m.Account, To: m.To, Kind: m.Kind, Subject: m.Subject, Body: m.Body,
			Status: m.Status, Error: m.Error}
	}
	return out, nil
}
