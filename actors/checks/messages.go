package checks

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fraudd/fraudd/actors"
)

// Public message texts: everything a client can read in an error body (SPEC
// §7), in one table. Internal causes are logged, never sent. Texts with a %
// verb are formats; their arguments are named beside them.
const (
	// The edge (fastapi).
	MsgServerError = "Server error."
	MsgNotFound    = "Not found."
	MsgMethod      = "Method not allowed."
	MsgTooLarge    = "Request body too large."
	MsgBadRequest  = "Bad request."
	MsgTimeout     = "Request timeout."
	MsgAdminAuth   = "Invalid admin token."
	MsgStorage     = "Service temporarily unavailable."
	CodeStorage    = "storage_unavailable"

	// Request framing (fastapi/edge.go).
	MsgURITooLong       = "URI too long."
	HintURITooLong      = "The request target is limited to %d bytes." // the limit
	MsgHeadersTooLarge  = "Request headers too large."
	HintHeadersTooLarge = "The request line and headers together are limited to %d bytes." // the limit
	HintLengthAndChunks = "Send Content-Length or Transfer-Encoding, not both."
	MsgContentEncoding  = "Unsupported Content-Encoding."
	HintContentEncoding = "Send the body as it is, or coded with one of gzip, deflate, br or zstd."
	HintBodyNotDecoded  = "The body is not valid %s data."                  // the Content-Encoding
	HintDecodedTooLarge = "The body, once decoded, is limited to %d bytes." // the limit

	// The admin API (ADMIN.md); its validation messages name the field.
	MsgAccountNotFound   = "Account not found."
	MsgAccountExists     = "An account with this email already exists."
	MsgAccountConflict   = "The account was changed by another request at the same time; nothing was changed by this one."
	HintAccountConflict  = "Read the account again and retry."
	MsgNoWebhookURL      = "No webhook URL is set for this account."
	HintNoWebhookURL     = "Set one with PUT /admin/v1/accounts/{id}/webhook first."
	MsgWebhooksOff       = "Webhook delivery is not running."
	MsgWebhookQueueFull  = "The account's webhook queue is full."
	HintWebhookQueueFull = "1,000 events are waiting or retrying for this endpoint; the test event was not queued. Read the delivery log, fix the receiver, and try again once they drain."
	MsgBackupNoDir       = "dir is required: an absolute path on the server's machine."
	MsgBackupDir         = "dir: %v." // why the directory cannot hold a backup
	MsgBackupExists      = "The backup directory exists and is not empty; a backup never overwrites one."
	MsgBackupFull        = "The backup directory's file system ran out of space (or quota) during the copy; what was written is removed. Free space there or choose another directory."
	MsgListLimit         = "limit must be an integer from 1 to %d." // the largest limit

	// Credentials (SPEC §5).
	MsgMissingKey       = "Missing Key."
	MsgInvalidKey       = "Invalid API Key."
	MsgSuspended        = "Account suspended."
	MsgNotAllowlisted   = "Caller address not on the key's allowlist."
	HintNoAuthorization = "Send your secret API key as `Authorization: Bearer <key>`."
	HintNotBearer       = "Use the Bearer scheme: `Authorization: Bearer <key>`."
	HintEmptyBearer     = "`Authorization: Bearer` was sent with nothing after it."
	HintAuthTwice       = "Send one Authorization header; this request carried more than one."
	HintExpiredToken    = "The access token is expired, or the key it was minted from was rotated or revoked: mint a new one at /oauth/token."
	HintUnsetKey        = "The key is the literal string %q: the variable meant to hold your API key is not set." // the key
	HintPublishable     = "This is a publishable key (pk_live_…) for the browser collector; the server must send its secret sk_live_ or sk_test_ key."
	HintWhitespace      = "The key contains whitespace; send it exactly as issued."
	HintBearerTwice     = "The word Bearer appears twice; send `Authorization: Bearer <key>`."
	HintKeyPrefix       = "API keys start with sk_live_ or sk_test_."
	HintUnknownKey      = "The key is not recognised: it may have been rotated, revoked or mistyped."
	HintSandboxOnly     = "The public sandbox key sk_test_sandbox works only on POST /v1/evaluate with the test_* tokens."
	HintSuspended       = "The account is suspended; contact the operator."
	HintNotAllowlisted  = "The calling address %s is not on this key's IP allowlist; requests from it will keep failing." // the address

	// Limits and quotas (SPEC §8).
	MsgTooMany     = "Too many requests."
	MsgLockedOut   = "Too many invalid credentials; try again later."
	MsgMonthly     = "Monthly allowance used up; it renews at 00:00 UTC on the 1st."
	CodeMonthly    = "monthly_quota_exceeded"
	MsgHourly      = "Hourly request limit reached."
	HintHourly     = "The hourly window started at your first request; retry after Retry-After seconds."
	MsgTokenLimits = "Too many token requests."

	// The token endpoint's error_description texts (SPEC 4.9).
	DescOAuthOff           = "OAuth is not enabled on this server."
	DescStorage            = "The account store is unavailable; retry later."
	DescUnavailable        = "The service is briefly unavailable; retry later."
	DescJSONUnreadable     = "The JSON body could not be read."
	DescRepeated           = "Each parameter may be sent once."
	DescBasicUnreadable    = "The Basic credentials could not be read."
	DescAuthTwice          = "Send one Authorization header; this request carried more than one."
	DescCredentialsTwice   = "Send the client credentials once: either Basic or the body."
	DescClientIDMismatch   = "The client_id in the body is not the one in the Basic credentials."
	DescGrantMissing       = "grant_type is required (client_credentials)."
	DescGrantUnsupported   = "Only grant_type=client_credentials is supported."
	DescCredentialsMissing = "client_id (account email) and client_secret (API key) are required."
	DescCredentialsLong    = "client_id and client_secret are at most 256 characters."
	DescClientAuth         = "Client authentication failed."
	DescSuspended          = "The account is suspended."
	DescNotAllowlisted     = "The calling address %s is not on this key's IP allowlist." // the address

	// Evaluate (SPEC 2.1, 4.1, 4.3).
	MsgInvalidToken     = "Invalid token."
	MsgBodyNotObject    = "The request body must be a JSON object."
	MsgBodyNotJSON      = "The request body is not valid JSON."
	MsgFormUnreadable   = "The form body could not be read."
	MsgFieldNotString   = "%s must be a string."             // the field
	MsgFieldNotObject   = "%s must be a JSON object."        // the field
	MsgFieldTooLong     = "%s is longer than %d characters." // the field, its bound
	MsgFieldNotUTF8     = "%s is not valid UTF-8."           // the field
	MsgSandboxToken     = "The public sandbox key only accepts the test tokens test_clean, test_vpn, test_proxy, test_datacenter and test_tor."
	HintSandboxToken    = "sk_test_sandbox is for trying the API; use your own live or test key for real tokens."
	MsgUnknownScenario  = "Unknown scenario."
	HintUnknownScenario = "scenario is one of clean, vpn, datacenter, proxy, tor, bot (default vpn)."

	// Lookups (SPEC 4.2, 4.7, 4.8).
	MsgInvalidIP   = "Invalid IP format."
	MsgPrivateIP   = "Private or reserved IP — nothing to look up."
	MsgMissingIP   = "Missing IP address."
	HintMappedIP   = "Send the IPv4 address alone, without the ::ffff: prefix."
	HintPrivateIP  = "Only public addresses have network intelligence."
	MsgBulkList    = "Missing list: send {\"ips\": [\"1.2.3.4\", …]} with up to 20 addresses."
	MsgBulkNoValid = "No valid public IP address in the list."

	// The MCP endpoint (SPEC 4.11), sent as JSON-RPC errors.
	MsgRPCBatch          = "Batch requests are not supported."
	MsgRPCUnchecked      = "Invalid request: send one JSON-RPC request per POST."
	MsgRPCParse          = "Parse error: the body is not JSON."
	MsgRPCNotObject      = "Invalid Request: the body must be one JSON-RPC request object."
	MsgRPCVersion        = `Invalid Request: "jsonrpc" must be "2.0".`
	MsgRPCMethodType     = `Invalid Request: "method" must be a string.`
	MsgRPCID             = `Invalid Request: "id" must be a string or an integer.`
	MsgRPCResponse       = `Invalid Request: a message needs a "method", or exactly one of "result" and "error".`
	MsgRPCMethodNotFound = "Method not found: %s" // the method, cut to 64 bytes
	MsgRPCContentType    = "Content-Type must be application/json."
	MsgRPCAccept         = "Accept must list application/json and text/event-stream."
	MsgRPCOrigin         = "Origin not allowed."
	MsgRPCHost           = "Host not allowed."
	// MsgRPCProtocolVersion names the versions /mcp speaks (comma-separated).
	MsgRPCProtocolVersion = "Bad Request: Unsupported protocol version (supported versions: %s)"

	// The browser collector (COLLECTOR.md).
	MsgPublishableKey  = "Invalid publishable key."
	HintPublishableKey = "Set data-key to the account's publishable key (pk_live_…); secret keys never go in a page."
	MsgOrigin          = "Origin not allowed for this key."
	HintOrigin         = "Add the page's origin (scheme://host[:port]) to the account's origins, or send the request from a listed one."
	MsgDeviceReport    = "The request body must be the collector's JSON report."
	HintDeviceReport   = "The device report is limited to %d bytes." // the limit
	HintDeviceSignals  = "The device report holds more than the collector sends."
	MsgCollectBudget   = "Daily device collection budget used up."
	CodeCollectBudget  = "collect_budget_exceeded"
	HintCollectBudget  = "The account's device reports for today are used up; collection resumes at 00:00 UTC. Evaluations go on without device evidence."

	// The device-evidence challenge (SPEC 4.10).
	MsgLiveKeyRequired  = "live key required"
	HintLiveKeyRequired = "Call this endpoint with your sk_live_ key (or a token minted from it)."
	MsgEventIDInvalid   = "fingerprintEventId is required: a string of 8 to 200 characters."
	MsgBetaDisabled     = "The device evidence beta is not enabled for this account."
	CodeBetaDisabled    = "device_evidence_disabled"
	HintBetaDisabled    = "The operator enables it per account."
	MsgOutstanding      = "Too many outstanding device-evidence challenges; use or let some expire."
	CodeOutstanding     = "too_many_outstanding_challenges"
	HintOutstanding     = "Challenges expire 2 minutes after issue."
	MsgEvidenceMissing  = "No fresh device event from a confirmed website for this fingerprintEventId."
	CodeEvidenceMissing = "device_event_not_eligible"
	HintEventOld        = "The device event is older than 5 minutes: collect a new one."
	HintEventOrigin     = "The device event was collected on a website that is not among the account's confirmed origins."
	HintEventUnknown    = "The device event is unknown to this account, or was pruned."
	MsgChallengeRate    = "Too many device-evidence challenges this hour."
	CodeChallengeRate   = "challenge_rate_limited"
	MsgEvidenceDown     = "Device evidence is temporarily unavailable; continue with normal checks."
	CodeEvidenceDown    = "evidence_unavailable"
)

// Retry-After values the SPEC names.
const (
	RetryAfterStorage = 30  // 503 storage_unavailable (SPEC §7)
	RetryAfterLockout = 900 // the invalid-key lockout (SPEC §5.6, 4.4)
	RetryAfterUsage   = 60  // the usage limiter (SPEC 4.4)
	RetryAfterTokens  = 60  // the token endpoint's limiter (SPEC 4.9)
)

// Refusal is an answer that is not the operation's result: an error the
// transport renders in one place (fastapi: an error body with its headers
// for HTTP, a JSON-RPC error for MCP). Refusals the pipeline shares (the
// package variables below) must not be modified.
type Refusal struct {
	Status int    // the HTTP status; MCP reports it too
	Msg    string // the error text, from the table above
	Code   string // machine-readable code, "" when none
	Hint   string // how to fix it, "" when none
	// RetryAfter is Retry-After in seconds; 0 sends none. Every 429 and 503
	// carries one.
	RetryAfter int64
	// RateLimit is the account's hourly figures when a charge was refused.
	RateLimit RateLimit
	// Cause is the internal failure behind a 5xx: logged, never sent.
	Cause error
	// Admission: the per-address limiters refused (or failed), in the
	// admission step a chained call took for Admit (Access.Chained). A
	// transport that renders Admit's refusals apart renders this one so.
	Admission bool
}

// RateLimit is the X-RateLimit-* figures of a charged call (SPEC 4.1):
// sent only when Capped (never for uncapped public-interest accounts).
type RateLimit struct {
	Capped                  bool
	Limit, Remaining, Reset int64
}

// Refusals that carry nothing of the call. Each renders the same every time.
var (
	RefuseStorage   = &Refusal{Status: http.StatusServiceUnavailable, Msg: MsgStorage, Code: CodeStorage, RetryAfter: RetryAfterStorage}
	RefuseOrigin    = &Refusal{Status: http.StatusForbidden, Msg: MsgOrigin, Hint: HintOrigin}
	refuseSuspended = &Refusal{Status: http.StatusForbidden, Msg: MsgSuspended, Hint: HintSuspended}
	refuseLiveKey   = &Refusal{Status: http.StatusUnauthorized, Msg: MsgLiveKeyRequired, Hint: HintLiveKeyRequired}
	refuseEvidence  = &Refusal{Status: http.StatusServiceUnavailable, Msg: MsgEvidenceDown, Code: CodeEvidenceDown, RetryAfter: RetryAfterStorage}
)

// Invalid is a 400 with msg: bad input the transport found while decoding.
func Invalid(msg string) *Refusal { return &Refusal{Status: http.StatusBadRequest, Msg: msg} }

// Invalidf is Invalid with a format from the table.
func Invalidf(format string, args ...any) *Refusal { return Invalid(fmt.Sprintf(format, args...)) }

// ServerError is the generic 500; cause is logged, never sent. An actor that
// could not answer (timed out, stopped, or its shard down and restarting) is
// the 503 of SPEC §7 instead: temporary, and nothing was carried out.
func ServerError(cause error) *Refusal {
	if errors.Is(cause, actors.ErrUnavailable) {
		return storageUnavailable(cause)
	}
	return &Refusal{Status: http.StatusInternalServerError, Msg: MsgServerError, Cause: cause}
}

// storageUnavailable is the 503 of SPEC §7 with its cause.
func storageUnavailable(cause error) *Refusal {
	r := *RefuseStorage
	r.Cause = cause
	return &r
}
