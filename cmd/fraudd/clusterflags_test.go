package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseServeClusterFlags(t *testing.T) {
	// Single-node: nothing of cluster mode is on, whatever the hostname.
	c, err := parseServe(nil, envVars{})
	if err != nil || c.cluster.enabled() || c.cluster.nodeID != "" || c.cluster.advertise != "" {
		t.Fatalf("single node: %+v %v", c.cluster, err)
	}

	// External etcd from the environment; the node id and the advertised
	// address default from the hostname and the listen port.
	defer func(h func() (string, error)) { osHostname = h }(osHostname)
	osHostname = func() (string, error) { return "node-7", nil }
	c, err = parseServe(nil, envVars{
		"FRAUDD_CLUSTER_ETCD": "etcd1:2379, https://etcd2:2379", "FRAUDD_CLUSTER_NAME": "prod-eu",
		"FRAUDD_CLUSTER_LEASE_TTL": "5s", "FRAUDD_CLUSTER_LISTEN": ":9100",
		"FRAUDD_CLUSTER_ETCD_CERT": "/c.pem", "FRAUDD_CLUSTER_ETCD_KEY": "/k.pem", "FRAUDD_CLUSTER_ETCD_CA": "/ca.pem",
	})
	if err != nil {
		t.Fatal(err)
	}
	cl := c.cluster
	if !cl.enabled() || cl.embedded || strings.Join(cl.etcd, "|") != "etcd1:2379|https://etcd2:2379" || cl.name != "prod-eu" ||
		cl.leaseTTL != 5*time.Second || cl.nodeID != "node-7" || cl.advertise != "node-7:9100" || cl.etcdCA != "/ca.pem" {
		t.Fatalf("external etcd: %+v", cl)
	}

	// Embedded etcd: its name follows the node id, its data dir the data dir.
	c, err = parseServe([]string{"--data-dir", "/d", "--cluster-embedded-etcd", "--cluster-node-id", "n1", "--cluster-advertise", "10.0.0.1:8090",
		"--cluster-initial", "n1=http://10.0.0.1:2380,n2=http://10.0.0.2:2380", "--cluster-etcd-peer-url", "http://10.0.0.1:2380"}, envVars{})
	if err != nil {
		t.Fatal(err)
	}
	cl = c.cluster
	if !cl.enabled() || !cl.embedded || cl.embedName != "n1" || cl.embedDir != "/d/etcd" || cl.advertise != "10.0.0.1:8090" ||
		cl.embedClientURL != "http://127.0.0.1:2379" || cl.leaseTTL != 3*time.Second || cl.name != "fraudd" {
		t.Fatalf("embedded etcd: %+v", cl)
	}
}

func TestParseServeRefusesBadClusterValues(t *testing.T) {
	defer func(h func() (string, error)) { osHostname = h }(osHostname)
	osHostname = func() (string, error) { return "", errors.New("no uts") }
	etcd := envVars{"FRAUDD_CLUSTER_ETCD": "127.0.0.1:2379", "FRAUDD_CLUSTER_NODE_ID": "n1"}
	with := func(kv ...string) envVars {
		e := envVars{}
		for k, v := range etcd {
			e[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			e[kv[i]] = kv[i+1]
		}
		return e
	}
	for _, c := range []struct {
		env  envVars
		args []string
		want []string
	}{
		{env: envVars{"FRAUDD_CLUSTER_NAME": "a"}, want: []string{"--cluster-name needs cluster mode"}},
		{args: []string{"--cluster-etcd-dir", "/x"}, want: []string{"--cluster-etcd-dir needs cluster mode"}},
		{env: with("FRAUDD_CLUSTER_ETCD_NAME", "e1"), want: []string{"--cluster-etcd-name configures the embedded", "--cluster-embedded-etcd"}},
		{env: envVars{"FRAUDD_CLUSTER_ETCD": "etcd1"}, want: []string{"FRAUDD_CLUSTER_ETCD", "not host:port", "accepted: comma-separated host:port"}},
		{env: envVars{"FRAUDD_CLUSTER_ETCD": "ftp://etcd1:2379"}, want: []string{"http(s)://host:port"}},
		{env: with("FRAUDD_CLUSTER_NAME", "a/b"), want: []string{"FRAUDD_CLUSTER_NAME", "without slashes"}},
		{env: with("FRAUDD_CLUSTER_LEASE_TTL", "1500ms"), want: []string{"FRAUDD_CLUSTER_LEASE_TTL", "out of range", "whole seconds"}},
		{env: with("FRAUDD_CLUSTER_LEASE_TTL", "3"), want: []string{"missing unit"}},
		{env: with("FRAUDD_CLUSTER_LISTEN", "9000"), want: []string{"FRAUDD_CLUSTER_LISTEN", "not host:port"}},
		{env: with("FRAUDD_CLUSTER_ADVERTISE", ":9000"), want: []string{"FRAUDD_CLUSTER_ADVERTISE", "host is empty"}},
		{env: with("FRAUDD_CLUSTER_NODE_ID", "a b"), want: []string{"FRAUDD_CLUSTER_NODE_ID", "not allowed"}},
		{env: with("FRAUDD_CLUSTER_ETCD_CERT", "/c.pem"), want: []string{"--cluster-etcd-cert and --cluster-etcd-key go together"}},
		{env: envVars{"FRAUDD_CLUSTER_ETCD": "127.0.0.1:2379"}, want: []string{"hostname cannot be read", "--cluster-node-id"}},
		{args: []string{"--cluster-embedded-etcd", "--cluster-node-id", "n1", "--cluster-initial", "n2=http://a:2380"}, want: []string{"does not list this member"}},
		{args: []string{"--cluster-embedded-etcd", "--cluster-node-id", "n1", "--cluster-initial", "n1=http://a:2380", "--cluster-etcd-join", "http://b:2379"}, want: []string{"--cluster-etcd-join joins a running etcd cluster", "give one of them"}},
		{args: []string{"--cluster-etcd", "e:2379", "--cluster-node-id", "n1", "--cluster-etcd-join", "http://b:2379"}, want: []string{"--cluster-etcd-join configures the embedded"}},
		{env: with("FRAUDD_CLUSTER_LEASE_AFTER", "-1"), want: []string{"--cluster-lease-after -1 is out of range"}},
		{args: []string{"--cluster-embedded-etcd", "--cluster-node-id", "n1", "--cluster-initial", "n1=a:2380"}, want: []string{"-cluster-initial", "name=peerURL"}},
		{args: []string{"--cluster-embedded-etcd", "--cluster-node-id", "n1", "--cluster-initial", "n1=http://a:1,n1=http://b:1"}, want: []string{"listed twice"}},
		{args: []string{"--cluster-embedded-etcd=maybe"}, want: []string{"-cluster-embedded-etcd", "true or false"}},
	} {
		_, err := parseServe(c.args, c.env)
		if err == nil {
			t.Errorf("%v %v: accepted", c.env, c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: error %q lacks %q", c.env, c.args, err, w)
			}
		}
	}
}

// TestClusterTLSNeedsATLSEndpoint: the etcd client dials an http://
// endpoint in plain text whatever its TLS configuration, so --cluster-etcd
// http://etcd:2379 with --cluster-etcd-ca (README: "turns on TLS") joined
// the cluster unencrypted, the CA and client certificate unused, without a
// word; with the embedded member alone (plain HTTP) TLS only made the node
// fail to reach it. Both are refused naming the flags; https:// and
// host:port endpoints take TLS.
func TestClusterTLSNeedsATLSEndpoint(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-etcd", "https://e1:2379,http://e2:2379", "--cluster-etcd-ca", "/ca.pem"},
			"--cluster-etcd-ca turns on TLS but the --cluster-etcd endpoint http://e2:2379 says http://, which the etcd client dials in plain text: write https://e2:2379 or e2:2379"},
		{[]string{"--cluster-etcd", "HTTP://e1:2379", "--cluster-etcd-cert", "/c.pem", "--cluster-etcd-key", "/k.pem"},
			"--cluster-etcd-cert turns on TLS but the --cluster-etcd endpoint HTTP://e1:2379 says http://"},
		{[]string{"--cluster-embedded-etcd", "--cluster-etcd-ca", "/ca.pem"},
			"--cluster-etcd-ca turns on TLS to an etcd you run (--cluster-etcd); the embedded member serves plain HTTP"},
	} {
		_, err := parseServe(append(c.args, "--cluster-node-id", "n1"), envVars{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	for _, ok := range [][]string{
		{"--cluster-etcd", "https://e1:2379,e2:2379", "--cluster-etcd-ca", "/ca.pem", "--cluster-etcd-cert", "/c.pem", "--cluster-etcd-key", "/k.pem"},
		{"--cluster-etcd", "http://e1:2379"},
		{"--cluster-embedded-etcd", "--cluster-etcd", "https://e1:2379", "--cluster-etcd-ca", "/ca.pem"},
	} {
		if _, err := parseServe(append(ok, "--cluster-node-id", "n1"), envVars{}); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
