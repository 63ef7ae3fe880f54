package fastapi

import (
	"time"

	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/actors/webhook"
)

// The operator lists a node keeps of what it handled itself: an account's
// recent evaluations, its webhook deliveries, the mail outbox. On one node
// the handlers read the actors; in cluster mode they read every member's,
// merged (Deps.EvaluationList and its neighbours), in the same shape.

// EvaluationLister lists an account's recent evaluations (*recent.Client,
// or cluster mode's every member's, merged).
type EvaluationLister interface {
	List(recent.List) ([]*recent.Evaluation, error)
}

// DeliveryLister lists an account's webhook delivery attempts
// (*webhook.Service, or cluster mode's every member's, merged).
type DeliveryLister interface {
	Recent(account string, now time.Time) ([]*webhook.Delivery, error)
}

// MailLister lists the outbox (*mailer.Mailer, or cluster mode's every
// member's, merged).
type MailLister interface {
	Recent(limit int) ([]*mailer.Mail, error)
	RecentOf(account string, limit int) ([]*mailer.Mail, error)
}

// evaluationLister is what the evaluations list reads; nil lists none.
func (s *Server) evaluationLister() EvaluationLister {
	switch {
	case s.deps.EvaluationList != nil:
		return s.deps.EvaluationList
	case s.deps.Recent != nil:
		return s.deps.Recent
	}
	return nil
}

// deliveryLister is what the deliveries list reads; nil lists none.
func (s *Server) deliveryLister() DeliveryLister {
	switch {
	case s.deps.DeliveryList != nil:
		return s.deps.DeliveryList
	case s.deps.Webhooks != nil:
		return s.deps.Webhooks
	}
	return nil
}

// mailLister is what the outbox list reads; nil lists none.
func (s *Server) mailLister() MailLister {
	switch {
	case s.deps.MailList != nil:
		return s.deps.MailList
	case s.deps.Mail != nil:
		return s.deps.Mail
	}
	return nil
}
