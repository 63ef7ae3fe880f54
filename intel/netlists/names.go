package netlists

// Feed names: the file name (plus feedfile.Ext) of each feed in the embedded
// data and in <data-dir>/feeds.
const (
	FeedTor          = "tor"            // Tor exit addresses
	FeedCloud        = "cloud"          // published cloud ranges, labelled with a provider id
	FeedDatacenter   = "datacenter"     // hosting / datacenter ranges
	FeedDatacenterAS = "datacenter-asn" // hosting / datacenter AS numbers
	FeedProviderAS   = "provider-asn"   // provider id and kind by AS number
	FeedVPNProvider  = "vpn-provider"   // VPN servers of named providers
	FeedVPN          = "vpn"            // commercial VPN ranges, provider unknown
	FeedPrivacyRelay = "privacy-relay"  // iCloud Private Relay egress
	FeedProxy        = "proxy"          // open proxies
	FeedBlocklist    = "blocklist"      // addresses on 3+ blocklists (ipsum)
	FeedDisposable   = "disposable"     // disposable e-mail domains
	FeedASN          = "asn"            // address → AS number
	FeedASNInfo      = "asn-info"       // AS number → organisation, registration country
	FeedGeo          = "geo"            // address → country
	FeedTZ           = "tz"             // IANA time zone → country
	FeedMobileAS     = "mobile-asn"     // mobile and satellite carrier AS numbers
	FeedMobileRanges = "mobile-ranges"  // carrier ranges (T-Mobile US)
	FeedVPNASN       = "vpn-asn"        // AS numbers of VPN operators and VPN-only networks
	FeedASNHosting   = "asn-hosting"    // share of each AS's space in datacenter or cloud ranges (computed)
)

// Kinds of the rows of the vpn-asn feed.
const (
	KindVPNOperator = "vpn"      // a VPN company's own AS (provider id as name)
	KindVPNList     = "vpn-list" // on a VPN AS list that also names general hosts

	// KindCuratedHosting marks datacenter-asn rows from the project's own
	// curated hosting list rather than a public one.
	KindCuratedHosting = "curated"
)

// FeedNames lists every feed a snapshot loads, in listing order.
var FeedNames = []string{
	FeedTor, FeedCloud, FeedDatacenter, FeedDatacenterAS, FeedProviderAS,
	FeedVPNProvider, FeedVPN, FeedPrivacyRelay, FeedProxy, FeedBlocklist,
	FeedDisposable, FeedASN, FeedASNInfo, FeedGeo, FeedTZ, FeedMobileAS,
	FeedMobileRanges, FeedVPNASN, FeedASNHosting,
}

// providerNames maps the provider ids of the cloud ranges and the
// provider-by-ASN list to the label shown in network.service. Ids not listed
// are shown as they are.
var providerNames = map[string]string{
	"aws":               "AWS",
	"gcp":               "Google Cloud",
	"google":            "Google",
	"azure":             "Microsoft Azure",
	"microsoft":         "Microsoft",
	"oracle":            "Oracle Cloud",
	"digitalocean":      "DigitalOcean",
	"linode":            "Linode",
	"vultr":             "Vultr",
	"cloudflare":        "Cloudflare",
	"ibm":               "IBM Cloud",
	"hetzner":           "Hetzner",
	"ovh":               "OVHcloud",
	"scaleway":          "Scaleway",
	"contabo":           "Contabo",
	"alibaba":           "Alibaba Cloud",
	"tencent":           "Tencent Cloud",
	"huawei-cloud":      "Huawei Cloud",
	"fastly":            "Fastly",
	"akamai":            "Akamai",
	"leaseweb":          "Leaseweb",
	"m247":              "M247",
	"datacamp":          "Datacamp",
	"clouvider":         "Clouvider",
	"performive":        "Performive",
	"quadranet":         "QuadraNet",
	"colocrossing":      "ColoCrossing",
	"frantech":          "FranTech",
	"ionos":             "IONOS",
	"strato":            "Strato",
	"netcup":            "netcup",
	"upcloud":           "UpCloud",
	"hostinger":         "Hostinger",
	"gthost":            "GTHost",
	"surfshark":         "Surfshark",
	"nordvpn":           "NordVPN",
	"protonvpn":         "Proton VPN",
	"privadovpn":        "PrivadoVPN",
	"mullvad":           "Mullvad",
	"ivpn":              "IVPN",
	"windscribe":        "Windscribe",
	"tor-exit-operator": "Tor exit operator",
	"starlink":          "Starlink",
}

func providerName(id string) string {
	if n, ok := providerNames[id]; ok {
		return n
	}
	return id
}

// Labels for network.service that no feed carries.
const (
	ServiceTor          = "TOR" // as SPEC 2.9 labels test_tor
	ServicePrivacyRelay = "iCloud Private Relay"
)
