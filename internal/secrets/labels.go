package secrets

// Derivation labels: every key derived from the master secret (Derive,
// NewSealer), in one table. Labels are append-only: a label, once used, is
// never renamed or given another purpose. Renaming one changes its key, so
// what was stored under it (key hashes, sealed secrets and account ids,
// sealed GPU samples, account hashes) no longer matches or opens, and every
// token minted under it stops verifying.
const (
	LabelAPIKeyPepper   = "api-key-pepper"           // HMAC of API and publishable keys (actors/accounts)
	LabelWebhookSecret  = "webhook-secret"           // seals webhook signing secrets at rest (actors/accounts)
	LabelAccessToken    = "oauth-access-token-hs256" // signs OAuth access tokens (internal/accesstoken)
	LabelNetworkToken   = "network-token"            // signs the collector's network tokens (intel/nettoken)
	LabelVisitorID      = "visitor-id"               // keys device visitor ids (intel/device)
	LabelDeviceEvidence = "device-evidence"          // the device-evidence beta; actors/challenge keys its own purposes under it
	LabelAccountHash    = "devicehist-account-hash"  // keyed hash of accountId (actors/devicehist)
	LabelAccountSeal    = "devicehist-account-id"    // seals the accountId copy (actors/devicehist)
)
