package wire

// Lookup is the lookup response of SPEC 2.3 (also each bulk result).
type Lookup struct {
	IP               string          `json:"ip"`
	Known            bool            `json:"known"`
	Verdict          string          `json:"verdict"`
	RiskScore        int             `json:"risk_score"`
	Signals          *LookupSignals  `json:"signals"`
	Network          *LookupNetwork  `json:"network"`
	LatencyMs        int64           `json:"latency_ms"`
	EngineVerdict    string          `json:"engine_verdict,omitempty"`
	VerdictSource    string          `json:"verdict_source,omitempty"`
	ExceptionMatched []string        `json:"exception_matched,omitempty"`
	Test             bool            `json:"test,omitempty"`
	Evidence         *LookupEvidence `json:"evidence,omitempty"`
}

// LookupEvidence (additive) says why a signal was set; absent when none was.
type LookupEvidence struct {
	Network []NetworkEvidence `json:"network"`
}

// LookupSignals are the bare lookup's booleans; the spellings proxied and dch
// are frozen (SPEC 2.3).
type LookupSignals struct {
	VPN     bool `json:"vpn"`
	Proxied bool `json:"proxied"`
	Tor     bool `json:"tor"`
	DCH     bool `json:"dch"`
	Anon    bool `json:"anon"`
}

// LookupNetwork is who owns the address. country and city are null on a bare
// lookup.
type LookupNetwork struct {
	ASN                 *uint32 `json:"asn"`
	Org                 *string `json:"org"`
	Country             *string `json:"country"`
	City                *string `json:"city"`
	Cloud               string  `json:"cloud,omitempty"`
	RegistrationCountry *string `json:"registration_country"`
	Source              string  `json:"source"`
}

// Bulk is the bulk lookup result.
type Bulk struct {
	Total      int      `json:"total"`
	Skipped    int      `json:"skipped"`
	Invalid    int      `json:"invalid"`
	NotChecked int      `json:"not_checked"`
	Results    []Lookup `json:"results"`
}

// Usage is GET /v1/usage (SPEC 2.4). Nullable fields are pointers.
type Usage struct {
	KeyType            string  `json:"key_type"`
	HourlyLimit        *int64  `json:"hourly_limit"`
	UsedThisHour       int64   `json:"used_this_hour"`
	Remaining          *int64  `json:"remaining"`
	Uncapped           bool    `json:"uncapped"`
	ResetsAt           *string `json:"resets_at"`
	TotalEvaluations   int64   `json:"total_evaluations"`
	LimitHits          int64   `json:"limit_hits"`
	Plan               string  `json:"plan"`
	MonthlyLimit       *int64  `json:"monthly_limit"`
	MonthUsed          int64   `json:"month_used"`
	MonthlyLookupLimit *int64  `json:"monthly_lookup_limit"`
	MonthLookupsUsed   int64   `json:"month_lookups_used"`
	MonthResetsAt      string  `json:"month_resets_at"`
	GrandfatheredUntil *string `json:"grandfathered_until"`
}
