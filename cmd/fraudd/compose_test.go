package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// TestClusterComposeConfiguresEachNode: deploy/cluster/compose.yaml's
// environment, as each node of it sees it, is a valid embedded-etcd cluster
// configuration for fraudd serve (docker is not needed to check that).
func TestClusterComposeConfiguresEachNode(t *testing.T) {
	b, err := os.ReadFile("../../deploy/cluster/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Services) != 3 {
		t.Fatalf("%d services, want 3", len(doc.Services))
	}
	// ${VAR:?message} takes its value from the operator's environment.
	interp := regexp.MustCompile(`^\$\{(\w+):\?[^}]*\}$`)
	ids, peers := map[string]bool{}, map[string]bool{}
	for name, svc := range doc.Services {
		env := envVars{}
		for k, v := range svc.Environment {
			if m := interp.FindStringSubmatch(v); m != nil {
				v = "from-" + m[1]
			}
			env[k] = v
		}
		c, err := parseServe(nil, env)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(c.unknownEnv) > 0 {
			t.Errorf("%s: variables that name no flag: %v", name, c.unknownEnv)
		}
		cl := c.cluster
		if !cl.enabled() || !cl.embedded || cl.nodeID == "" || !strings.Contains(cl.initial, cl.embedName+"="+cl.embedPeerURL) {
			t.Errorf("%s: not an embedded-etcd node listed in --cluster-initial with its peer URL: %+v", name, cl)
		}
		if ids[cl.nodeID] || peers[cl.embedPeerURL] {
			t.Errorf("%s: node id or peer URL shared with another service", name)
		}
		ids[cl.nodeID], peers[cl.embedPeerURL] = true, true
	}
}
