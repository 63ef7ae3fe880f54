package wire

// EvalAccount is the evaluate answer's `account` object (SPEC 2.2, since
// 2026-10-18): present when an accountId was sent with a live key. The keys
// follow the reference's order; nulls are explicit, never omitted.
type EvalAccount struct {
	// AccountsOnDevice24h: accounts seen on this device in 24 h, this one
	// included; null without device evidence.
	AccountsOnDevice24h *int `json:"accounts_24h_on_this_device"`
	// DevicesForAccount24h: devices this account was checked on in 24 h.
	DevicesForAccount24h int `json:"devices_24h_for_this_account"`
	// AccountsFromIP24h: accounts from this address in 24 h; null when the
	// address is unmeasured or a shared exit (VPN, proxy, datacenter, Tor,
	// privacy relay, mobile carrier).
	AccountsFromIP24h *int `json:"accounts_24h_from_this_ip"`
	// NewDevice: the account was seen on another device and never this one;
	// null without device evidence.
	NewDevice *bool `json:"new_device"`
	// RelatedAccounts90d: the caller's other accounts that shared a device or
	// an address with this one within 90 days.
	RelatedAccounts90d int `json:"related_accounts_90d"`
}

// CustomerHistory is device.customer_history: the device on the caller's
// account only, counted in distinct verified events, test-key traffic
// excluded; window_days is 90.
type CustomerHistory struct {
	Visits     int    `json:"visits"`
	Returning  bool   `json:"returning"`
	FirstSeen  string `json:"first_seen"`
	LastSeen   string `json:"last_seen"`
	Accounts   int    `json:"accounts"`
	WindowDays int    `json:"window_days"`
}

// AdminDevice is one line of GET /admin/v1/accounts/{id}/devices (the 50
// most recently seen devices, newest first).
type AdminDevice struct {
	VisitorID      string `json:"visitor_id"`
	FirstSeen      string `json:"first_seen"`
	LastSeen       string `json:"last_seen"`
	Visits         int    `json:"visits"`
	LinkedAccounts int    `json:"linked_accounts"`
}
