package wire

// WebhookDelivery is one delivery attempt in the admin list
// (GET /admin/v1/accounts/{id}/webhook/deliveries), newest first.
type WebhookDelivery struct {
	EventID string `json:"event_id"`
	Event   string `json:"event"`
	Attempt int    `json:"attempt"`
	// Status: delivered (2xx), retrying (a later attempt is scheduled) or
	// failed (the last attempt failed).
	Status     string  `json:"status"`
	StatusCode *int    `json:"status_code"`
	Error      *string `json:"error"`
	URL        string  `json:"url"`
	// Timestamp is the event's own (the payload's timestamp).
	Timestamp     string  `json:"timestamp"`
	AttemptedAt   string  `json:"attempted_at"`
	DurationMs    int64   `json:"duration_ms"`
	NextAttemptAt *string `json:"next_attempt_at"`
}

// WebhookTest is the answer of POST /admin/v1/accounts/{id}/webhook/test.
type WebhookTest struct {
	EventID string `json:"event_id"`
	Event   string `json:"event"`
}
