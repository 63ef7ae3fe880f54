package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// clusterFlags are serve's --cluster-* flags. Cluster mode is on only when
// --cluster-etcd or --cluster-embedded-etcd is given; without them every
// other --cluster-* flag is refused, so a half-configured node never runs as
// a lone node that believes it is clustered.
type clusterFlags struct {
	name      string
	etcd      []string
	etcdCA    string
	etcdCert  string
	etcdKey   string
	nodeID    string
	listen    string
	advertise string
	leaseTTL  time.Duration
	// leaseAfter is --cluster-lease-after: charges a second for one
	// account past which a node asks its owner for a slice (0: never).
	leaseAfter int64

	embedded       bool
	embedName      string
	embedDir       string
	embedClientURL string
	embedPeerURL   string
	initial        string
	// join: client URLs of a running etcd cluster the embedded member
	// joins (--cluster-etcd-join).
	join []string
}

// enabled says whether serve runs in cluster mode.
func (c *clusterFlags) enabled() bool { return len(c.etcd) > 0 || c.embedded }

func addClusterFlags(fs *flag.FlagSet, c *clusterFlags) {
	c.name, c.listen, c.leaseTTL, c.leaseAfter = "fraudd", ":8090", 3*time.Second, 200
	c.embedClientURL, c.embedPeerURL = "http://127.0.0.1:2379", "http://127.0.0.1:2380"
	fs.Var(clusterNameValue{&c.name}, "cluster-name", "cluster mode: the cluster's name; every node of one cluster gives the same (its keys live under /fraudd/<name>/ in etcd)")
	fs.Var(endpointList{&c.etcd}, "cluster-etcd", "cluster mode: comma-separated etcd endpoints (host:port or http(s)://host:port); with --cluster-embedded-etcd and this empty, the embedded member's own")
	fs.StringVar(&c.etcdCA, "cluster-etcd-ca", "", "cluster mode: PEM CA bundle that signs the etcd servers' certificates (turns on TLS)")
	fs.StringVar(&c.etcdCert, "cluster-etcd-cert", "", "cluster mode: PEM client certificate for etcd (with --cluster-etcd-key)")
	fs.StringVar(&c.etcdKey, "cluster-etcd-key", "", "cluster mode: PEM private key of --cluster-etcd-cert")
	fs.Var(nodeIDValue{&c.nodeID}, "cluster-node-id", "cluster mode: this node's id, unique among live nodes (default: the hostname)")
	fs.Var(hostPort{s: &c.listen, anyHost: true}, "cluster-listen", "cluster mode: listen address of the node-to-node gRPC service")
	fs.Var(hostPort{s: &c.advertise}, "cluster-advertise", "cluster mode: host:port the other nodes dial for this node's gRPC service (default: --cluster-node-id and --cluster-listen's port)")
	fs.Var(leaseTTLValue{&c.leaseTTL}, "cluster-lease-ttl", "cluster mode: membership lease TTL, whole seconds from 1s to 60s; a node silent this long loses its shards")
	fs.Int64Var(&c.leaseAfter, "cluster-lease-after", c.leaseAfter, "cluster mode: requests a second for one account on a node that does not own it, past which the node charges a slice of the account's allowance lent by the owner instead of asking it each time (0: never; at most 1000000)")
	fs.BoolVar(&c.embedded, "cluster-embedded-etcd", false, "cluster mode: run an etcd member inside this process (a small cluster without an external etcd)")
	fs.Var(nodeIDValue{&c.embedName}, "cluster-etcd-name", "embedded etcd: the member's name in --cluster-initial (default: --cluster-node-id)")
	fs.Var(optionalDirValue{&c.embedDir}, "cluster-etcd-dir", "embedded etcd: the member's data directory (default: <data-dir>/etcd)")
	fs.Var(urlValue{&c.embedClientURL}, "cluster-etcd-client-url", "embedded etcd: URL the member serves clients on, e.g. http://0.0.0.0:2379")
	fs.Var(urlValue{&c.embedPeerURL}, "cluster-etcd-peer-url", "embedded etcd: URL the other members reach this one on, and that it binds, so an IP address, e.g. http://10.0.0.11:2380")
	fs.Var(endpointList{&c.join}, "cluster-etcd-join", "embedded etcd: comma-separated client URLs of a running etcd cluster this member joins (added as a learner, then promoted); not with --cluster-initial")
	fs.Var(initialValue{&c.initial}, "cluster-initial", "embedded etcd: every member of a new etcd cluster as name=peerURL,… (empty: this member alone)")
}

// clusterOnly are the flags that mean nothing outside cluster mode.
var clusterOnly = []string{"cluster-name", "cluster-etcd-ca", "cluster-etcd-cert", "cluster-etcd-key", "cluster-node-id",
	"cluster-listen", "cluster-advertise", "cluster-lease-ttl", "cluster-lease-after"}

// embedOnly are the flags that mean nothing without --cluster-embedded-etcd.
var embedOnly = []string{"cluster-etcd-name", "cluster-etcd-dir", "cluster-etcd-client-url", "cluster-etcd-peer-url", "cluster-initial", "cluster-etcd-join"}

// finish checks the flags against each other and fills the defaults that
// depend on others. given names the flags set by the command line or the
// environment.
func (c *clusterFlags) finish(given map[string]bool, dataDir string, hostname func() (string, error)) error {
	if !c.enabled() {
		for _, f := range append(clusterOnly, embedOnly...) {
			if given[f] {
				return fmt.Errorf("--%s needs cluster mode: give --cluster-etcd or --cluster-embedded-etcd too", f)
			}
		}
		return nil
	}
	if !c.embedded {
		for _, f := range embedOnly {
			if given[f] {
				return fmt.Errorf("--%s configures the embedded etcd member: give --cluster-embedded-etcd too", f)
			}
		}
	}
	if c.leaseAfter < 0 || c.leaseAfter > 1_000_000 {
		return fmt.Errorf("--cluster-lease-after %d is out of range: give 0 (no slices) to 1000000 requests a second", c.leaseAfter)
	}
	if (c.etcdCert == "") != (c.etcdKey == "") {
		return errors.New("--cluster-etcd-cert and --cluster-etcd-key go together: give both or neither")
	}
	if err := c.checkTLS(); err != nil {
		return err
	}
	if c.nodeID == "" {
		h, err := hostname()
		if err != nil {
			return fmt.Errorf("--cluster-node-id is empty and the hostname cannot be read (%v): give --cluster-node-id", err)
		}
		if err := (nodeIDValue{&c.nodeID}).Set(h); err != nil {
			return fmt.Errorf("--cluster-node-id defaults to the hostname %q, which is not a valid id (%v): give --cluster-node-id", h, err)
		}
	}
	if c.advertise == "" {
		_, port, _ := net.SplitHostPort(c.listen)
		c.advertise = net.JoinHostPort(c.nodeID, port)
	}
	if c.embedded {
		if c.embedName == "" {
			c.embedName = c.nodeID
		}
		if c.embedDir == "" {
			c.embedDir = filepath.Join(dataDir, "etcd")
		}
		if c.initial != "" && len(c.join) > 0 {
			return errors.New("--cluster-etcd-join joins a running etcd cluster and --cluster-initial lists a new one's members: give one of them")
		}
		if c.initial != "" && !strings.Contains(","+c.initial, ","+c.embedName+"=") {
			return fmt.Errorf("--cluster-initial does not list this member (%s=%s)", c.embedName, c.embedPeerURL)
		}
	}
	return nil
}

// checkTLS refuses the TLS flags where they cannot take effect. The etcd
// client dials an http:// endpoint in plain text whatever its TLS
// configuration, so --cluster-etcd http://etcd:2379 with
// --cluster-etcd-ca (which README says turns on TLS) joined the cluster
// unencrypted, the CA and the client certificate unused, without a word.
// The embedded member (no --cluster-etcd) serves plain HTTP, so TLS made
// the node fail to reach it after a 10 s wait.
func (c *clusterFlags) checkTLS() error {
	flag := "--cluster-etcd-ca"
	switch {
	case c.etcdCert != "" && c.etcdCA == "":
		flag = "--cluster-etcd-cert"
	case c.etcdCA == "":
		return nil
	}
	if len(c.etcd) == 0 {
		return fmt.Errorf("%s turns on TLS to an etcd you run (--cluster-etcd); the embedded member serves plain HTTP: give --cluster-etcd too, or drop %s", flag, flag)
	}
	for _, e := range c.etcd {
		if u, err := url.Parse(e); err == nil && u.Scheme == "http" {
			return fmt.Errorf("%s turns on TLS but the --cluster-etcd endpoint %s says http://, which the etcd client dials in plain text: write https://%s or %s", flag, e, u.Host, u.Host)
		}
	}
	return nil
}

// clusterNameValue is --cluster-name: a non-empty name without slashes or spaces.
type clusterNameValue struct{ s *string }

func (v clusterNameValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v clusterNameValue) Set(s string) error {
	if s == "" || strings.ContainsAny(s, "/ \t\n") || len(s) > 64 {
		return errors.New("want 1 to 64 characters without slashes or spaces")
	}
	*v.s = s
	return nil
}

func (v clusterNameValue) Forms() string {
	return "a name of 1 to 64 characters without slashes or spaces"
}

func (v clusterNameValue) Kind() string { return "name" }

// nodeIDValue is a node id or etcd member name: letters, digits, '.', '_', '-'.
type nodeIDValue struct{ s *string }

func (v nodeIDValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v nodeIDValue) Set(s string) error {
	if s == "" || len(s) > 64 {
		return errors.New("want 1 to 64 characters")
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("character %q not allowed", r)
		}
	}
	*v.s = s
	return nil
}

func (v nodeIDValue) Forms() string { return "1 to 64 letters, digits, '.', '_' or '-'" }

func (v nodeIDValue) Kind() string { return "id" }

// endpointList is --cluster-etcd: host:port or http(s)://host:port entries.
type endpointList struct{ l *[]string }

func (v endpointList) String() string {
	if v.l == nil {
		return ""
	}
	return strings.Join(*v.l, ",")
}

func (v endpointList) Set(s string) error {
	var out []string
	for _, e := range splitList(s) {
		hp := e
		if strings.Contains(e, "://") {
			u, err := url.Parse(e)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" && u.Path != "/" {
				return fmt.Errorf("%q is not http(s)://host:port", e)
			}
			hp = u.Host
		}
		if err := checkHostPort(hp, false, false); err != nil {
			return fmt.Errorf("%q: %v", e, err)
		}
		out = append(out, e)
	}
	*v.l = out
	return nil
}

func (v endpointList) Forms() string {
	return "comma-separated host:port or http(s)://host:port, e.g. etcd1:2379,etcd2:2379"
}

func (v endpointList) Kind() string { return "endpoints" }

// urlValue is an http(s)://host:port URL.
type urlValue struct{ s *string }

func (v urlValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v urlValue) Set(s string) error {
	if err := checkURL(s); err != nil {
		return err
	}
	*v.s = s
	return nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") {
		return errors.New("not http(s)://host:port")
	}
	return checkHostPort(u.Host, false, false)
}

func (v urlValue) Forms() string { return "http(s)://host:port, e.g. http://10.0.0.5:2380" }

func (v urlValue) Kind() string { return "url" }

// initialValue is --cluster-initial: name=peerURL,… .
type initialValue struct{ s *string }

func (v initialValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v initialValue) Set(s string) error {
	var parts []string
	seen := map[string]bool{}
	for _, p := range splitList(s) {
		name, u, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("%q is not name=peerURL", p)
		}
		var n string
		if err := (nodeIDValue{&n}).Set(name); err != nil {
			return fmt.Errorf("member name %q: %v", name, err)
		}
		if seen[name] {
			return fmt.Errorf("member %q listed twice", name)
		}
		seen[name] = true
		if err := checkURL(u); err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
		parts = append(parts, p)
	}
	*v.s = strings.Join(parts, ",")
	return nil
}

func (v initialValue) Forms() string {
	return "comma-separated name=peerURL, e.g. n1=http://n1:2380,n2=http://n2:2380,n3=http://n3:2380"
}

func (v initialValue) Kind() string { return "members" }

// leaseTTLValue is --cluster-lease-ttl: whole seconds from 1s to 60s (etcd
// counts leases in seconds).
type leaseTTLValue struct{ d *time.Duration }

func (v leaseTTLValue) String() string {
	if v.d == nil {
		return "3s"
	}
	return v.d.String()
}

func (v leaseTTLValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "time: "))
	}
	if d < time.Second || d > time.Minute || d%time.Second != 0 {
		return errors.New("out of range")
	}
	*v.d = d
	return nil
}

func (v leaseTTLValue) Get() any { return *v.d }

func (v leaseTTLValue) Forms() string { return "whole seconds from 1s to 60s, e.g. 3s" }

func (v leaseTTLValue) Kind() string { return "duration" }

var osHostname = os.Hostname
