// Package wire holds the JSON shapes of every response the service sends,
// shared by every transport (HTTP and MCP in fastapi) and by the pipeline that
// builds the answers (actors/checks). They are plain structs (never maps) so
// the encoder's output is stable field by field; golden files in
// fastapi/testdata pin them. wire imports nothing of ours.
package wire

import (
	"encoding/json"
	"time"
)

// Time formats t as every answer's date-time: RFC 3339 in UTC, whole seconds.
func Time(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// OptTime is Time for a nullable date-time.
func OptTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := Time(*t)
	return &s
}

// Error is the error body of SPEC §7.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
	Hint  string `json:"hint,omitempty"`
}

// OAuthError is the token endpoint's error body.
type OAuthError struct {
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
	Code             string `json:"code,omitempty"`
}

// Uptime is the status payload's uptime block.
type Uptime struct {
	Days    int    `json:"days"`
	Hours   int    `json:"hours"`
	Minutes int    `json:"minutes"`
	Started string `json:"started"`
}

// ServiceHealth is one entry of the status payload's services object.
type ServiceHealth struct {
	Status    string  `json:"status"`
	UptimePct float64 `json:"uptime_pct"`
}

// Services are the per-service health entries of /api/status.
type Services struct {
	API            ServiceHealth `json:"api"`
	Storage        ServiceHealth `json:"storage"`
	Authentication ServiceHealth `json:"authentication"`
	Feeds          ServiceHealth `json:"feeds"`
}

// Status is the /api/status payload (SPEC 2.4).
type Status struct {
	Status     string       `json:"status"`
	Uptime     Uptime       `json:"uptime"`
	Services   Services     `json:"services"`
	LastProbe  string       `json:"last_probe"`
	Version    string       `json:"version"`
	History90d []HistoryDay `json:"history_90d,omitempty"`
}

// HistoryDay is one day of the status history, oldest first; a null
// percentage means no probe ran that day.
type HistoryDay struct {
	Day               string   `json:"day"`
	Pct               *float64 `json:"pct"`
	Samples           uint64   `json:"samples"`
	APIPct            *float64 `json:"api_pct"`
	DashboardPct      *float64 `json:"dashboard_pct"`
	AuthenticationPct *float64 `json:"authentication_pct"`
}

// KeyInfo shows a key without its secret part.
type KeyInfo struct {
	Prefix     string  `json:"prefix"`
	Last4      string  `json:"last4"`
	CreatedAt  string  `json:"created_at,omitempty"`
	ValidUntil *string `json:"valid_until,omitempty"`
}

// Account is the admin view of an account (no secrets).
type Account struct {
	ID                 string   `json:"id"`
	Email              string   `json:"email"`
	Plan               string   `json:"plan"`
	CreatedAt          string   `json:"created_at"`
	HourlyLimit        *int64   `json:"hourly_limit"`
	MonthlyLimit       *int64   `json:"monthly_limit"`
	Suspended          bool     `json:"suspended"`
	Allowlist          []string `json:"allowlist"`
	Origins            []string `json:"origins"`
	DeviceEvidenceBeta bool     `json:"device_evidence_beta"`
	WebhookURL         *string  `json:"webhook_url"`
	PublishableKey     string   `json:"publishable_key"`
	LiveKey            KeyInfo  `json:"live_key"`
	PreviousLiveKey    *KeyInfo `json:"previous_live_key"`
	TestKey            KeyInfo  `json:"test_key"`
	// Limits are the allowances in force now: hourly_limit and
	// monthly_limit above are only the custom figures PATCH sets.
	Limits AccountLimits `json:"limits"`
}

// AccountLimits are an account's allowances at the time of the answer: its
// plan's, its custom figures, or the grandfathered ones (SPEC §8). Null:
// none applies.
type AccountLimits struct {
	Hourly             *int64  `json:"hourly"`
	Monthly            *int64  `json:"monthly"`
	MonthlyLookups     *int64  `json:"monthly_lookups"`
	GrandfatheredUntil *string `json:"grandfathered_until"`
}

// CreatedAccount is the answer of account creation: the only time the secrets
// are shown.
type CreatedAccount struct {
	ID             string `json:"id"`
	Email          string `json:"email"`
	Plan           string `json:"plan"`
	CreatedAt      string `json:"created_at"`
	HourlyLimit    *int64 `json:"hourly_limit,omitempty"`
	MonthlyLimit   *int64 `json:"monthly_limit,omitempty"`
	LiveKey        string `json:"live_key"`
	TestKey        string `json:"test_key"`
	PublishableKey string `json:"publishable_key"`
	WebhookSecret  string `json:"webhook_secret"`
}

// RotatedLive is the answer of a live-key rotation.
type RotatedLive struct {
	LiveKey            string `json:"live_key"`
	PreviousValidUntil string `json:"previous_valid_until"`
}

// RotatedTest is the answer of a test-key rotation.
type RotatedTest struct {
	TestKey string `json:"test_key"`
}

// WebhookSecret is the answer of a webhook secret rotation.
type WebhookSecret struct {
	WebhookSecret string `json:"webhook_secret"`
}

// Webhook is the answer of setting the webhook URL.
type Webhook struct {
	URL *string `json:"url"`
}

// Rule is one custom rule.
type Rule struct {
	Signal string `json:"signal"`
	Action string `json:"action"`
}

// Pin is one exception pin; exactly one of IP and VisitorID is set.
type Pin struct {
	IP        string `json:"ip,omitempty"`
	VisitorID string `json:"visitor_id,omitempty"`
	Action    string `json:"action"`
	Label     string `json:"label,omitempty"`
}

// Backup is the answer of POST /admin/v1/backup.
type Backup struct {
	Dir   string   `json:"dir"`
	Files []string `json:"files"`
	Notes []string `json:"notes"`
}

// ClockNow is the answer of the test clock.
type ClockNow struct {
	Now string `json:"now"`
}

// Mail is one outbox record of GET /admin/v1/mail.
type Mail struct {
	ID      string `json:"id"`
	At      string `json:"at"`
	Account string `json:"account_id"`
	To      string `json:"to"`
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
	Status  string `json:"status"`
	Error   string `json:"error,omitempty"`
}

// ThreatFeed is GET /api/threat-feed (SPEC 2.4).
type ThreatFeed struct {
	Today     FeedToday    `json:"today"`
	WeekTotal uint64       `json:"week_total"`
	Week      FeedWeek     `json:"week"`
	Coverage  FeedCoverage `json:"coverage"`
}

// FeedToday is the rolling 24 hours.
type FeedToday struct {
	Total   uint64 `json:"total"`
	Threats uint64 `json:"threats"`
	VPN     uint64 `json:"vpn"`
	Proxy   uint64 `json:"proxy"`
	DCH     uint64 `json:"dch"`
}

// FeedWeek is the rolling week.
type FeedWeek struct {
	Total   uint64 `json:"total"`
	Threats uint64 `json:"threats"`
}

// FeedCoverage is what the loaded feeds cover; 0 means a feed did not load.
type FeedCoverage struct {
	DCRanges          int `json:"dch_ranges"`
	CloudProviders    int `json:"cloud_providers"`
	TorExits          int `json:"tor_exits"`
	DisposableDomains int `json:"disposable_domains"`
}

// Token is the token endpoint's answer.
type Token struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"`
	Scope       string `json:"scope"`
}

// ASMetadata is the OAuth authorization-server metadata (RFC 8414).
type ASMetadata struct {
	Issuer                            string   `json:"issuer"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	GrantTypesSupported               []string `json:"grant_types_supported"`
	TokenEndpointAuthMethodsSupported []string `json:"token_endpoint_auth_methods_supported"`
	ScopesSupported                   []string `json:"scopes_supported"`
	ResponseTypesSupported            []string `json:"response_types_supported"`
}

// PRMetadata is the OAuth protected-resource metadata (RFC 9728).
type PRMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
}

// RPCError is a JSON-RPC 2.0 error response (MCP refusals).
type RPCError struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   RPCErrorBody    `json:"error"`
}

// RPCErrorBody is the error member of a JSON-RPC error.
type RPCErrorBody struct {
	Code    int       `json:"code"`
	Message string    `json:"message"`
	Data    *RPCRetry `json:"data,omitempty"`
}

// RPCRetry tells a refused agent when to retry, and carries the refusal's
// machine-readable code and hint (SPEC §7) that the HTTP error body has.
type RPCRetry struct {
	RetryAfter int64  `json:"retry_after,omitempty"`
	Code       string `json:"code,omitempty"`
	Hint       string `json:"hint,omitempty"`
}

// RPCToolResult is a JSON-RPC 2.0 response to tools/call (the MCP fast path).
type RPCToolResult struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  ToolResult      `json:"result"`
}

// ToolResult is an MCP CallToolResult with the lookup as structured content.
type ToolResult struct {
	Content           []RPCText `json:"content"`
	StructuredContent *Lookup   `json:"structuredContent,omitempty"`
	IsError           bool      `json:"isError,omitempty"`
}

// RPCText is an MCP text content item.
type RPCText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}
