package wire

import "encoding/json"

// Evaluate is the evaluate response of SPEC 2.2: legacy and modern fields
// together. Optional blocks are pointers so they are absent, not empty, when
// their inputs were not sent.
type Evaluate struct {
	Status           string            `json:"status"`
	Decision         string            `json:"decision"`
	DecisionSource   string            `json:"decision_source,omitempty"`
	RuleMatched      []string          `json:"rule_matched,omitempty"`
	ExceptionMatched *ExceptionMatched `json:"exception_matched,omitempty"`
	EngineDecision   string            `json:"engine_decision,omitempty"`
	RiskScore        int               `json:"risk_score"`
	IsSuspicious     bool              `json:"isSuspicious"`
	IP               string            `json:"ip"`
	Country          *string           `json:"country"`
	Degraded         bool              `json:"degraded"`
	Network          EvalNetwork       `json:"network"`
	Device           *EvalDevice       `json:"device,omitempty"`
	Account          *EvalAccount      `json:"account,omitempty"`
	Email            *EvalEmail        `json:"email,omitempty"`
	Timezone         *EvalTimezone     `json:"timezone,omitempty"`
	Reasons          []string          `json:"reasons"`
	EvaluatedInMs    int64             `json:"evaluated_in_ms"`
	DeviceStatus     string            `json:"device_status,omitempty"`
	Evidence         *Evidence         `json:"evidence,omitempty"`
	Test             bool              `json:"test"`
	Sandbox          bool              `json:"sandbox"`
	Sample           bool              `json:"sample"`
	Details          Details           `json:"details"`
}

// EvalNetwork is the network block. Complete and SDKBlocked appear on live
// evaluations only (CLARIFICATIONS.md).
type EvalNetwork struct {
	VPN          bool    `json:"vpn"`
	Proxy        bool    `json:"proxy"`
	PrivacyRelay bool    `json:"privacy_relay"`
	Datacenter   bool    `json:"datacenter"`
	Tor          bool    `json:"tor"`
	Anonymous    bool    `json:"anonymous"`
	Residential  bool    `json:"residential"`
	Service      *string `json:"service"`
	Complete     *bool   `json:"complete,omitempty"`
	SDKBlocked   *bool   `json:"sdk_blocked,omitempty"`
}

// EvalDevice is the device block (only when a device event resolved).
type EvalDevice struct {
	Antidetect      bool             `json:"antidetect"`
	Automation      bool             `json:"automation"`
	Emulator        bool             `json:"emulator"`
	VirtualMachine  bool             `json:"virtual_machine"`
	Incognito       bool             `json:"incognito"`
	PrivacyMode     bool             `json:"privacy_mode"`
	IPBlocklisted   bool             `json:"ip_blocklisted"`
	HighActivity    bool             `json:"high_activity"`
	VisitorID       string           `json:"visitor_id"`
	TamperingScore  float64          `json:"tampering_score"`
	Complete        bool             `json:"complete"`
	CheckedSignals  []string         `json:"checked_signals"`
	TimesSeen       int64            `json:"times_seen"`
	FirstSeen       string           `json:"first_seen"`
	Returning       bool             `json:"returning"`
	LinkedAccounts  *int64           `json:"linked_accounts,omitempty"`
	MultiAccount    bool             `json:"multi_account"`
	CustomerHistory *CustomerHistory `json:"customer_history,omitempty"`
	// Experimental device-evidence beta (SPEC 2.5, 2.6); only when sent.
	GPUEvidence        *GPUEvidence        `json:"gpu_evidence,omitempty"`
	BrowserConsistency *BrowserConsistency `json:"browser_consistency,omitempty"`
}

// EvalEmail is the email block (only when an email was sent).
type EvalEmail struct {
	Disposable bool `json:"disposable"`
}

// EvalTimezone is the timezone block (only when a recognised zone was sent).
type EvalTimezone struct {
	Reported  string  `json:"reported"`
	Country   *string `json:"country"`
	MatchesIP bool    `json:"matches_ip"`
	Checked   bool    `json:"checked"`
}

// Evidence is the freshness block, and (additive) why each network flag
// was set.
type Evidence struct {
	NetworkAgeS    *int64            `json:"network_age_s,omitempty"`
	DeviceAgeS     *int64            `json:"device_age_s,omitempty"`
	DeviceReplayed *bool             `json:"device_replayed,omitempty"`
	Network        []NetworkEvidence `json:"network,omitempty"`
}

// NetworkEvidence says why one network flag was set: which source matched,
// with the list's snapshot date when it is a dated list. Absent when no
// network flag is set.
type NetworkEvidence struct {
	Flag   string `json:"flag"`             // vpn, proxy, privacy_relay, datacenter, tor
	Source string `json:"source"`           // e.g. tor_exits, asn, asn_hosting_share, network_token, test_token
	Detail string `json:"detail,omitempty"` // e.g. "AS136787 NordVPN", a provider, a share
	Listed string `json:"listed,omitempty"` // snapshot date of the list, YYYY-MM-DD
}

// Details is the legacy mirror of the network block.
type Details struct {
	IP      string  `json:"ip"`
	CC      *string `json:"cc"`
	VPN     bool    `json:"vpn"`
	Proxied bool    `json:"proxied"`
	Anon    bool    `json:"anon"`
	DCH     bool    `json:"dch"`
	Service *string `json:"service"`
	Tor     bool    `json:"tor"`
}

// ExceptionMatched is a string when one pin matched and a list when several
// (CLARIFICATIONS.md).
type ExceptionMatched struct {
	Names []string
}

// MarshalJSON writes the one name as a string, several as a list.
func (e *ExceptionMatched) MarshalJSON() ([]byte, error) {
	if len(e.Names) == 1 {
		return json.Marshal(e.Names[0])
	}
	return json.Marshal(e.Names)
}
