package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// deployment is the part of a Deployment the test reads.
type deployment struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec struct {
				Grace      int `yaml:"terminationGracePeriodSeconds"`
				Containers []struct {
					Env []struct {
						Name  string `yaml:"name"`
						Value string `yaml:"value"`
					} `yaml:"env"`
					Lifecycle struct {
						PreStop struct {
							Exec struct {
								Command []string `yaml:"command"`
							} `yaml:"exec"`
						} `yaml:"preStop"`
					} `yaml:"lifecycle"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// scaledObject is the part of a KEDA ScaledObject the test reads.
type scaledObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Spec       struct {
		Target struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		Min      int `yaml:"minReplicaCount"`
		Max      int `yaml:"maxReplicaCount"`
		Triggers []struct {
			Type       string            `yaml:"type"`
			MetricType string            `yaml:"metricType"`
			Metadata   map[string]string `yaml:"metadata"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

// decodeOne decodes the single document of file into v, refusing fields v
// does not know only where strict is set.
func decodeOne(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		t.Fatalf("%s holds more than one document", file)
	}
}

// The Deployment's preStop hook drains the pod's own worker with the CLI,
// on the table and stream the service consumes, and its grace period covers
// the drain and the shutdown after it.
func TestDeploymentDrainsBeforeStopping(t *testing.T) {
	var d deployment
	decodeOne(t, "deployment.yaml", &d)
	if d.Kind != "Deployment" || len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want a Deployment of one container, got %+v", d)
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	cmd := c.Lifecycle.PreStop.Exec.Command
	if len(cmd) != 3 || cmd[0] != "/bin/sh" || cmd[1] != "-c" {
		t.Fatalf("preStop: want /bin/sh -c CLI, got %q", cmd)
	}
	want := `exec shardlease drain -table ` + env["LEASE_TABLE"] + ` -stream ` + env["STREAM"] + ` -owner "$POD_NAME" -wait 30s`
	if cmd[2] != want {
		t.Errorf("preStop runs %q, want %q", cmd[2], want)
	}
	if _, ok := env["POD_NAME"]; !ok {
		t.Error("POD_NAME, the owner id the service runs with and the hook drains, is not set")
	}
	lease, err1 := time.ParseDuration(env["LEASE_DURATION"])
	shutdown, err2 := time.ParseDuration(env["SHUTDOWN_TIMEOUT"])
	if err1 != nil || err2 != nil {
		t.Fatalf("LEASE_DURATION and SHUTDOWN_TIMEOUT must be durations: %v, %v", err1, err2)
	}
	// The request reaches the worker at its next renewal (L/3), each lease
	// waits for its batch in hand (the shutdown timeout), then SIGTERM and
	// Run's shutdown (the shutdown timeout again).
	need := lease/3 + shutdown + shutdown
	if grace := time.Duration(d.Spec.Template.Spec.Grace) * time.Second; grace < need {
		t.Errorf("terminationGracePeriodSeconds %v does not cover the drain and the shutdown, %v", grace, need)
	}
}

// The ScaledObject scales the Deployment on the workers-wanted gauge, as the
// Prometheus exporter names the library's instrument, one pod per worker
// wanted.
func TestScaledObjectScalesOnWorkersWanted(t *testing.T) {
	var d deployment
	decodeOne(t, "deployment.yaml", &d)
	var s scaledObject
	decodeOne(t, "scaledobject.yaml", &s)
	if s.APIVersion != "keda.sh/v1alpha1" || s.Kind != "ScaledObject" {
		t.Fatalf("want a KEDA ScaledObject, got %s %s", s.APIVersion, s.Kind)
	}
	if s.Spec.Target.Kind != "Deployment" || s.Spec.Target.Name != d.Metadata.Name {
		t.Errorf("scaleTargetRef %+v does not name the Deployment %s", s.Spec.Target, d.Metadata.Name)
	}
	if s.Spec.Min < 2 || s.Spec.Max < s.Spec.Min {
		t.Errorf("replicas %d to %d: keep two workers, so that one can take over from the other", s.Spec.Min, s.Spec.Max)
	}
	if len(s.Spec.Triggers) != 1 {
		t.Fatalf("want one trigger, got %d", len(s.Spec.Triggers))
	}
	tr := s.Spec.Triggers[0]
	if tr.Type != "prometheus" || tr.MetricType != "AverageValue" || tr.Metadata["threshold"] != "1" {
		t.Errorf("trigger %+v: want prometheus, AverageValue, threshold 1 (one pod per worker wanted)", tr)
	}
	names := exportedNames(t)
	metric := regexp.MustCompile(`shardlease_[a-z_]+`).FindString(tr.Metadata["query"])
	if metric != "shardlease_workers_wanted" || !names[metric] {
		t.Errorf("query %q: want the workers-wanted gauge; the library exports %v", tr.Metadata["query"], names)
	}
}

// exportedNames returns the Prometheus names of the instruments
// WithMeterProvider's doc lists: dots become underscores, a unit of ms or s
// adds _milliseconds or _seconds, a counter _total.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("../../consumer_metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line := regexp.MustCompile(`^//\t(shardlease\.[a-z_.]+)\s+(counter|gauge|histogram)\s+(ms,|s,)?`)
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name := strings.ReplaceAll(m[1], ".", "_")
		switch m[3] {
		case "ms,":
			name += "_milliseconds"
		case "s,":
			name += "_seconds"
		}
		if m[2] == "counter" {
			name += "_total"
		}
		out[name] = true
	}
	if len(out) < 20 {
		t.Fatalf("read only %d instruments from WithMeterProvider's doc", len(out))
	}
	return out
}
