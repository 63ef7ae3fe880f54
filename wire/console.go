package wire

// RecentEvaluation is one entry of GET /admin/v1/accounts/{id}/evaluations.
type RecentEvaluation struct {
	At             string `json:"at"`
	RequestID      string `json:"request_id"`
	Decision       string `json:"decision"`
	EngineDecision string `json:"engine_decision"`
	// DecisionSource is engine, rules or exception: the policy that decided.
	DecisionSource   string   `json:"decision_source"`
	Rule             *string  `json:"rule"`
	RuleMatched      []string `json:"rule_matched"`
	ExceptionMatched *string  `json:"exception_matched"`
	RiskScore        int      `json:"risk_score"`
	Reasons          []string `json:"reasons"`
	IP               string   `json:"ip"`
	Country          *string  `json:"country"`
	Test             bool     `json:"test"`
}

// AccountUsage is GET /admin/v1/accounts/{id}/usage: both keys' figures as
// /v1/usage reports them, and the counted calls per UTC day.
type AccountUsage struct {
	Live  Usage      `json:"live"`
	Test  Usage      `json:"test"`
	Daily []DayUsage `json:"daily"`
}

// DayUsage is one UTC day of counted visitor checks and lookups.
type DayUsage struct {
	Day     string `json:"day"`
	Used    int64  `json:"used"`
	Lookups int64  `json:"lookups"`
}

// FeedFreshness is one feed of GET /admin/v1/feeds.
type FeedFreshness struct {
	Name string `json:"name"`
	// Date is the snapshot's date (YYYY-MM-DD), null when its sources carry
	// none; AgeDays counts whole days from it to today (service clock).
	Date    *string `json:"date"`
	AgeDays *int    `json:"age_days"`
	Entries int     `json:"entries"`
	Source  string  `json:"source"`
}
