package storage

// Key schema. Every key starts with one prefix byte naming the record kind.
// Prefixes are append-only: a value, once used, is never reused for another kind.
const (
	prefixMeta       byte = 0x01 // meta records (probe, schema version)
	prefixAccount    byte = 0x10 // account id → account record
	prefixEmail      byte = 0x11 // lower-cased email → account id
	prefixKeyHash    byte = 0x12 // reserved: key bindings live in memory, rebuilt from accounts
	prefixRules      byte = 0x13 // account id → rule set
	prefixPins       byte = 0x14 // account id → exception pins
	prefixUsage      byte = 0x20 // account id + month → monthly counters (quota actors)
	prefixTotals     byte = 0x21 // account id → lifetime totals (quota actors)
	prefixDevice     byte = 0x30 // 90-day period + visitor hash → a device's global sightings (times_seen, first_seen; sightings.go, actors/events)
	prefixEvent      byte = 0x31 // day + event id → collector device event (events.go, actors/events)
	prefixHist       byte = 0x32 // kind + customer + device / account hash / address → per-customer device history (devicehist.go, actors/devicehist)
	prefixHistExpiry byte = 0x33 // day + kind + identity → empty: retention index of 0x32 (devicehist.go)
	prefixHistRecent byte = 0x34 // customer + ^last seen + device → empty: most recently seen devices (devicehist.go)
	prefixGPUSample  byte = 0x35 // customer + device hash → sealed latest GPU feature vector (challenge.go, actors/challenge)
	prefixHistLog    byte = 0x36 // sequence → device-history changes not yet folded into 0x32–0x34 (histjournal.go)
	// 0x37–0x3f: free for further device records.
	prefixMail        byte = 0x40 // time + id → mail outbox record
	prefixDelivery    byte = 0x41 // account id + 0x00 + time + event id + attempt → webhook delivery attempt
	prefixHookPending byte = 0x42 // account id + 0x00 + event id → webhook event still being delivered (hookpending.go, actors/webhook)
	prefixTraffic     byte = 0x50 // bucket start → threat-feed traffic counts
	prefixHealth      byte = 0x51 // UTC day → status probe counts

	// account id + 0x00 + time + sequence → one recent evaluation, at most 200
	// per account, kept 7 days (recent.go, actors/recent)
	prefixEvaluation byte = 0x43
	// account id + UTC day → counted checks and lookups of the day, 62 days
	// (dailyusage.go, quota actors)
	prefixUsageDay byte = 0x22
	// account id + month + origin node id → a member's monthly counters it
	// handed over on leaving the cluster (adoptedshares.go)
	prefixAdoptedUsage byte = 0x23
	// account id + origin node id → that member's lifetime totals, likewise
	prefixAdoptedTotals byte = 0x24
)
