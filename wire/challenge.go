package wire

// Challenge is the device-evidence challenge response (SPEC 2.4).
type Challenge struct {
	Challenge           string `json:"challenge"`
	ExpiresAt           string `json:"expires_at"`
	Protocol            string `json:"protocol"`
	ConsistencyProtocol string `json:"consistency_protocol"`
	Experimental        bool   `json:"experimental"`
}

// GPUEvidence is device.gpu_evidence (SPEC 2.2): resemblance only.
type GPUEvidence struct {
	Status        string   `json:"status"`
	NearestDevice string   `json:"nearest_device,omitempty"`
	RMSDistance   *float64 `json:"rms_distance,omitempty"`
}

// ConsistencyCheck is one entry of device.browser_consistency.checks.
type ConsistencyCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"`
}

// BrowserConsistency is device.browser_consistency (SPEC 2.2).
type BrowserConsistency struct {
	Status          string             `json:"status"`
	Experimental    bool               `json:"experimental"`
	Source          string             `json:"source"`
	AffectsDecision bool               `json:"affects_decision"`
	Findings        []string           `json:"findings"`
	Checks          []ConsistencyCheck `json:"checks"`
}
