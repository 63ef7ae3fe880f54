package fastapi

import (
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/wire"
)

// clusterLists stands for cluster mode's merged lists: it answers one
// line each, and notes what it was asked.
type clusterLists struct{ asked []string }

func (c *clusterLists) List(l recent.List) ([]*recent.Evaluation, error) {
	c.asked = append(c.asked, "evaluations "+l.Account)
	return []*recent.Evaluation{{Account: l.Account, At: fixedNow, RequestID: "req_other_node", Decision: "allow", EngineDecision: "allow", IP: "unknown"}}, nil
}

type clusterDeliveries struct{ *clusterLists }

func (c clusterDeliveries) Recent(account string, _ time.Time) ([]*webhook.Delivery, error) {
	c.asked = append(c.asked, "deliveries "+account)
	return []*webhook.Delivery{{Account: account, EventID: "evt_other_node", Event: "test", Attempt: 1, EventAt: fixedNow, At: fixedNow, StatusCode: 200}}, nil
}

type clusterMail struct{ *clusterLists }

func (c clusterMail) Recent(int) ([]*mailer.Mail, error) {
	c.asked = append(c.asked, "mail")
	return []*mailer.Mail{{ID: "mail_other_node", At: fixedNow, Status: "recorded"}}, nil
}

func (c clusterMail) RecentOf(account string, _ int) ([]*mailer.Mail, error) {
	c.asked = append(c.asked, "mail "+account)
	return []*mailer.Mail{{ID: "mail_other_node", At: fixedNow, Account: account, Status: "recorded"}}, nil
}

// TestAdminListsReadTheClusterLists: with the cluster's lists set (cluster
// mode), the recent evaluations, the webhook deliveries and the outbox are
// read there instead of from the node's own actors, in the same shape.
func TestAdminListsReadTheClusterLists(t *testing.T) {
	e := newConsoleEnv(t, false)
	c := &clusterLists{}
	e.srv.deps.EvaluationList, e.srv.deps.DeliveryList, e.srv.deps.MailList = c, clusterDeliveries{c}, clusterMail{c}
	id := e.acct.View.ID
	evals := decodeJSON[[]wire.RecentEvaluation](t, e.do("GET", "/admin/v1/accounts/"+id+"/evaluations", "Bearer adm", nil))
	if len(evals) != 1 || evals[0].RequestID != "req_other_node" || evals[0].DecisionSource != "engine" {
		t.Fatalf("evaluations: %+v", evals)
	}
	dels := decodeJSON[[]wire.WebhookDelivery](t, e.do("GET", "/admin/v1/accounts/"+id+"/webhook/deliveries", "Bearer adm", nil))
	if len(dels) != 1 || dels[0].EventID != "evt_other_node" || dels[0].Status != "delivered" || dels[0].NextAttemptAt != nil {
		t.Fatalf("deliveries: %+v", dels)
	}
	mail := decodeJSON[[]wire.Mail](t, e.do("GET", "/admin/v1/mail", "Bearer adm", nil))
	if len(mail) != 1 || mail[0].ID != "mail_other_node" {
		t.Fatalf("mail: %+v", mail)
	}
	if mail = decodeJSON[[]wire.Mail](t, e.do("GET", "/admin/v1/mail?account="+id, "Bearer adm", nil)); len(mail) != 1 || mail[0].Account != id {
		t.Fatalf("mail of the account: %+v", mail)
	}
	want := []string{"evaluations " + id, "deliveries " + id, "mail", "mail " + id}
	if len(c.asked) != len(want) {
		t.Fatalf("asked %v, want %v", c.asked, want)
	}
	for i := range want {
		if c.asked[i] != want[i] {
			t.Fatalf("asked %v, want %v", c.asked, want)
		}
	}
}
