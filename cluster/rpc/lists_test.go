package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/storage"
)

// fakeLists is one node's own operator lists, newest first as the store
// answers them, filtered and cut as the actors do.
type fakeLists struct {
	evals []*recent.Evaluation
	dels  []*storage.Delivery
	mail  []*storage.Mail
	err   error
}

func (f *fakeLists) List(l recent.List) ([]*recent.Evaluation, error) {
	var out []*recent.Evaluation
	for _, e := range f.evals {
		if e.Account == l.Account && !e.At.Before(l.Now.Add(-recent.Retention)) && len(out) < l.Limit {
			out = append(out, e)
		}
	}
	return out, f.err
}

type fakeDeliveries struct{ *fakeLists }

func (f fakeDeliveries) Recent(account string, now time.Time) ([]*storage.Delivery, error) {
	var out []*storage.Delivery
	for _, d := range f.dels {
		if d.Account == account && !d.At.Before(now.Add(-webhook.Retention)) && len(out) < webhook.ListLen {
			out = append(out, d)
		}
	}
	return out, f.err
}

type fakeMail struct{ *fakeLists }

func (f fakeMail) Recent(limit int) ([]*storage.Mail, error) { return f.RecentOf("", limit) }

func (f fakeMail) RecentOf(account string, limit int) ([]*storage.Mail, error) {
	var out []*storage.Mail
	for _, m := range f.mail {
		if (account == "" || m.Account == account) && len(out) < limit {
			out = append(out, m)
		}
	}
	return out, f.err
}

func (f *fakeLists) local() LocalLists {
	return LocalLists{Evaluations: f, Deliveries: fakeDeliveries{f}, Mail: fakeMail{f}}
}

// listOwners is a membership of several live members at fixed addresses.
type listOwners struct {
	*fakeOwners
	ids []string
}

func (o listOwners) Members() []string { return o.ids }
func (o listOwners) Known() []string   { return o.ids }

// listNodes serves the lists of each member but the first ("a", which
// asks) on a loopback port (wrap, when set, builds a member's service from
// its server: an older build, a hung one), and returns a's routing client
// over the membership of every id in lists plus extra (members that do not
// serve: their address refuses connections).
func listNodes(t *testing.T, lists map[string]*fakeLists, wrap map[string]func(*Server) NodeServer, extra ...string) *Quota {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 1, Logger: quietLog})
	t.Cleanup(func() { local.Stop() })
	addrs := map[string]string{}
	var ids []string
	for id, l := range lists {
		ids = append(ids, id)
		if id == "a" {
			continue
		}
		s, err := NewServer(ServerConfig{Quota: local, Owners: &fakeOwners{self: id}, Now: func() time.Time { return testNow }})
		if err != nil {
			t.Fatal(err)
		}
		s.ServeLists(l.local())
		var n NodeServer = s
		if w := wrap[id]; w != nil {
			n = w(s)
		}
		addrs[id] = listenNode(t, n)
	}
	for _, id := range extra {
		ids = append(ids, id)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[id] = l.Addr().String()
		l.Close()
	}
	slices.Sort(ids)
	q, err := NewQuota(QuotaConfig{Local: local, Owners: listOwners{&fakeOwners{self: "a", addrs: addrs}, ids}, Timeout: 500 * time.Millisecond, Workers: 1, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

// spread deals n lines, newest first, to nodes in turn: add(l, i) adds
// line i (0 the newest) to nodes[i%len(nodes)]'s lists.
func spread(lists map[string]*fakeLists, nodes []string, n int, add func(l *fakeLists, i int)) {
	for i := range n {
		add(lists[nodes[i%len(nodes)]], i)
	}
}

const listAccount = "acct_lists"

func at(i int) time.Time { return testNow.Add(-time.Duration(i) * time.Minute) }

// TestListsMergeEveryMember: each list read through one member is every
// member's, merged newest first and cut at the list's limit as one node's
// is; the outbox of one account leaves the others' mail out.
func TestListsMergeEveryMember(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	lists := map[string]*fakeLists{"a": {}, "b": {}, "c": {}}
	spread(lists, nodes, 9, func(l *fakeLists, i int) {
		l.evals = append(l.evals, &recent.Evaluation{Account: listAccount, At: at(i), RequestID: fmt.Sprintf("req-%d", i), Decision: "allow",
			EngineDecision: "allow", Risk: i, Reasons: []string{"vpn"}, IP: "203.0.113.7", Country: "DE"})
		l.mail = append(l.mail, &storage.Mail{ID: fmt.Sprintf("m%d", i), At: at(i), Account: [2]string{listAccount, "acct_other"}[i%2],
			To: "ops@example.com", Kind: "usage_hourly_80", Subject: "s", Body: "b", Status: "recorded"})
	})
	spread(lists, nodes, 40, func(l *fakeLists, i int) {
		l.dels = append(l.dels, &storage.Delivery{Account: listAccount, EventID: fmt.Sprintf("evt_%02d", i), Event: "test", Attempt: 1,
			EventAt: at(i), At: at(i), Duration: time.Millisecond, URL: "https://hooks.example/x", StatusCode: 200, NextAt: time.Time{}})
	})
	// An evaluation past the retention is listed by no member.
	lists["b"].evals = append(lists["b"].evals, &recent.Evaluation{Account: listAccount, At: testNow.Add(-recent.Retention - time.Minute), RequestID: "old"})
	q := listNodes(t, lists, nil)

	evals, err := q.EvaluationList(lists["a"]).List(recent.List{Account: listAccount, Now: testNow, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if got := requestIDs(evals); !slices.Equal(got, []string{"req-0", "req-1", "req-2", "req-3", "req-4"}) {
		t.Fatalf("the 5 newest evaluations over three members: %v", got)
	}
	if e := evals[1]; e.Account != listAccount || e.Risk != 1 || !e.At.Equal(at(1)) || e.IP != "203.0.113.7" || e.Country != "DE" || !slices.Equal(e.Reasons, []string{"vpn"}) {
		t.Fatalf("b's evaluation came as %+v", e)
	}
	all, err := q.EvaluationList(lists["a"]).List(recent.List{Account: listAccount, Now: testNow, Limit: recent.Size})
	if err != nil || len(all) != 9 {
		t.Fatalf("every evaluation: %d %v", len(all), err)
	}

	dels, err := q.DeliveryList(fakeDeliveries{lists["a"]}).Recent(listAccount, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(dels) != webhook.ListLen || dels[0].EventID != "evt_00" || dels[len(dels)-1].EventID != fmt.Sprintf("evt_%02d", webhook.ListLen-1) {
		t.Fatalf("the %d newest deliveries over three members: %d, %s to %s", webhook.ListLen, len(dels), dels[0].EventID, dels[len(dels)-1].EventID)
	}
	for i, d := range dels {
		if !d.At.Equal(at(i)) || d.StatusCode != 200 || d.Attempt != 1 || !d.NextAt.IsZero() || d.Duration != time.Millisecond {
			t.Fatalf("delivery %d came as %+v", i, d)
		}
	}

	ml := q.MailList(fakeMail{lists["a"]})
	mail, err := ml.Recent(4)
	if err != nil || !slices.Equal(mailIDs(mail), []string{"m0", "m1", "m2", "m3"}) {
		t.Fatalf("the 4 newest mails: %v %v", mailIDs(mail), err)
	}
	mail, err = ml.RecentOf(listAccount, 200)
	if err != nil || !slices.Equal(mailIDs(mail), []string{"m0", "m2", "m4", "m6", "m8"}) {
		t.Fatalf("one account's mail: %v %v", mailIDs(mail), err)
	}
}

// TestListsTiesKeepEachMemberOrder: lines of the same instant keep their
// member's order, and members' ties go by member id, on any node.
func TestListsTiesKeepEachMemberOrder(t *testing.T) {
	lists := map[string]*fakeLists{"a": {}, "b": {}}
	for _, id := range []string{"b", "a"} {
		for i := range 2 {
			lists[id].evals = append(lists[id].evals, &recent.Evaluation{Account: listAccount, At: testNow, RequestID: fmt.Sprintf("%s-%d", id, i)})
		}
	}
	q := listNodes(t, lists, nil)
	evals, err := q.EvaluationList(lists["a"]).List(recent.List{Account: listAccount, Now: testNow, Limit: 10})
	if got := requestIDs(evals); err != nil || !slices.Equal(got, []string{"a-0", "a-1", "b-0", "b-1"}) {
		t.Fatalf("ties: %v %v", got, err)
	}
}

// TestListsMemberDown: a member that refuses connections, or hangs, is
// left out: the list holds the others' parts, within the client's Timeout.
func TestListsMemberDown(t *testing.T) {
	lists := map[string]*fakeLists{"a": {}, "b": {}, "c": {}}
	for i, id := range []string{"a", "b", "c"} {
		lists[id].mail = []*storage.Mail{{ID: id, At: at(i), Account: listAccount}}
		lists[id].evals = []*recent.Evaluation{{Account: listAccount, At: at(i), RequestID: id}}
		lists[id].dels = []*storage.Delivery{{Account: listAccount, EventID: "evt_" + id, Attempt: 1, At: at(i)}}
	}
	q := listNodes(t, lists, map[string]func(*Server) NodeServer{"c": func(*Server) NodeServer { return hungLists{} }}, "d")
	start := time.Now()
	mail, err := q.MailList(fakeMail{lists["a"]}).Recent(10)
	if err != nil || !slices.Equal(mailIDs(mail), []string{"a", "b"}) {
		t.Fatalf("mail with c hung and d down: %v %v", mailIDs(mail), err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a hung member held the list %v", took)
	}
	evals, err := q.EvaluationList(lists["a"]).List(recent.List{Account: listAccount, Now: testNow, Limit: 10})
	if err != nil || !slices.Equal(requestIDs(evals), []string{"a", "b"}) {
		t.Fatalf("evaluations with c hung and d down: %v %v", requestIDs(evals), err)
	}
	dels, err := q.DeliveryList(fakeDeliveries{lists["a"]}).Recent(listAccount, testNow)
	if err != nil || len(dels) != 2 || dels[0].EventID != "evt_a" || dels[1].EventID != "evt_b" {
		t.Fatalf("deliveries with c hung and d down: %d %v", len(dels), err)
	}
}

// hungLists answers no list call until its caller gives up.
type hungLists struct{ UnimplementedNodeServer }

func (hungLists) RecentEvaluations(ctx context.Context, _ *ListRequest) (*EvaluationsReply, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungLists) Deliveries(ctx context.Context, _ *ListRequest) (*DeliveriesReply, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungLists) Mail(ctx context.Context, _ *ListRequest) (*MailReply, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestListsOlderPeer: a member of a build before the list calls answers
// Unimplemented (grpc itself, for a method it does not know): its part is
// left out, and the list answers with the others'.
func TestListsOlderPeer(t *testing.T) {
	lists := map[string]*fakeLists{"a": {}, "b": {}, "c": {}}
	for i, id := range []string{"a", "b", "c"} {
		lists[id].evals = []*recent.Evaluation{{Account: listAccount, At: at(i), RequestID: id}}
		lists[id].mail = []*storage.Mail{{ID: id, At: at(i), Account: listAccount}}
	}
	q := listNodes(t, lists, map[string]func(*Server) NodeServer{"b": func(*Server) NodeServer { return UnimplementedNodeServer{} }})
	evals, err := q.EvaluationList(lists["a"]).List(recent.List{Account: listAccount, Now: testNow, Limit: 10})
	if err != nil || !slices.Equal(requestIDs(evals), []string{"a", "c"}) {
		t.Fatalf("evaluations with b of an older build: %v %v", requestIDs(evals), err)
	}
	mail, err := q.MailList(fakeMail{lists["a"]}).RecentOf(listAccount, 10)
	if err != nil || !slices.Equal(mailIDs(mail), []string{"a", "c"}) {
		t.Fatalf("mail with b of an older build: %v %v", mailIDs(mail), err)
	}
}

// TestListsOwnPartFails: this node's own list failing fails the merged
// one with its error (503 at the edge, as on one node).
func TestListsOwnPartFails(t *testing.T) {
	broken := &fakeLists{err: fmt.Errorf("read: %w", recent.ErrUnavailable)}
	q := listNodes(t, map[string]*fakeLists{"a": broken, "b": {}}, nil)
	if _, err := q.EvaluationList(broken).List(recent.List{Account: listAccount, Now: testNow, Limit: 5}); !errors.Is(err, recent.ErrUnavailable) {
		t.Fatalf("evaluations over a broken store: %v", err)
	}
	if _, err := q.DeliveryList(fakeDeliveries{broken}).Recent(listAccount, testNow); !errors.Is(err, recent.ErrUnavailable) {
		t.Fatalf("deliveries over a broken store: %v", err)
	}
	if _, err := q.MailList(fakeMail{broken}).Recent(5); !errors.Is(err, recent.ErrUnavailable) {
		t.Fatalf("mail over a broken store: %v", err)
	}
}

// TestListCallsCheckTheirRequest: a malformed request is InvalidArgument;
// a node whose lists are not attached yet answers Unavailable; a member's
// fields past their bounds are cut to them.
func TestListCallsCheckTheirRequest(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 1, Logger: quietLog})
	t.Cleanup(func() { local.Stop() })
	s, err := NewServer(ServerConfig{Quota: local, Owners: &fakeOwners{self: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := &ListRequest{Version: version, Account: listAccount, Limit: 5, NowUnixNano: testNow.UnixNano()}
	if _, err := s.RecentEvaluations(ctx, ok); status.Code(err) != codes.Unavailable {
		t.Fatalf("before ServeLists: %v", err)
	}
	l := &fakeLists{mail: []*storage.Mail{{ID: "m", At: testNow, Account: listAccount, Body: string(make([]byte, maxListBody+10)) + "é"}}}
	s.ServeLists(l.local())
	for _, r := range []*ListRequest{
		{Account: listAccount, Limit: 5, NowUnixNano: 1},
		{Version: version, Account: listAccount, Limit: 0, NowUnixNano: 1},
		{Version: version, Account: listAccount, Limit: recent.Size + 1, NowUnixNano: 1},
		{Version: version, Limit: 5, NowUnixNano: 1},
		{Version: version, Account: listAccount, Limit: 5},
		{Version: version, Account: string(make([]byte, maxObsAccountID+1)), Limit: 5, NowUnixNano: 1},
	} {
		if _, err := s.RecentEvaluations(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("evaluations %v: %v", r, err)
		}
	}
	if _, err := s.Deliveries(ctx, &ListRequest{Version: version, Account: listAccount, Limit: webhook.ListLen + 1, NowUnixNano: 1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("deliveries past their limit: %v", err)
	}
	if _, err := s.Mail(ctx, &ListRequest{Version: version, Limit: maxMailLines + 1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("mail past its limit: %v", err)
	}
	rep, err := s.Mail(ctx, &ListRequest{Version: version, Limit: 1})
	if err != nil || len(rep.Mail) != 1 || len(rep.Mail[0].Body) != maxListBody || rep.Node != "b" {
		t.Fatalf("the outbox of every account: %v %v", rep, err)
	}
	if _, err := mailOf(rep, "b", "", 1); err != nil {
		t.Fatalf("a clipped mail is refused: %v", err)
	}
	if _, err := mailOf(rep, "c", "", 1); err == nil {
		t.Fatal("b's outbox passed as c's")
	}
	if _, err := mailOf(rep, "b", "acct_other", 1); err == nil {
		t.Fatal("another account's mail passed")
	}
}

func requestIDs(es []*recent.Evaluation) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.RequestID
	}
	return out
}

func mailIDs(ms []*storage.Mail) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}
