package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
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
			Metadata struct {
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				Grace      int         `yaml:"terminationGracePeriodSeconds"`
				Containers []container `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// container is the part of a Deployment's container the test reads.
type container struct {
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom struct {
			FieldRef struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	} `yaml:"readinessProbe"`
	Lifecycle map[string]any `yaml:"lifecycle"`
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

// The Deployment runs the service as main.go reads it: the variables it
// sets are the service's (POD_NAME from the pod's name) and valid, the port,
// the readiness probe and the scrape annotations are the service's, no
// preStop hook calls a CLI the image lacks (the service drains on SIGTERM),
// and the grace period covers the service's longest stop.
func TestDeploymentMatchesTheService(t *testing.T) {
	var d deployment
	decodeOne(t, "deployment.yaml", &d)
	if d.Kind != "Deployment" || len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want a Deployment of one container, got %+v", d)
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.Name == envPodName && e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
			t.Errorf("%s comes from %q, want the downward API's metadata.name", envPodName, e.ValueFrom.FieldRef.FieldPath)
		}
		if !slices.Contains(envNames, e.Name) && !strings.HasPrefix(e.Name, "AWS_") {
			t.Errorf("the Deployment sets %s, which the service does not read (it reads %v and the AWS SDK's AWS_*)", e.Name, envNames)
		}
	}
	for _, name := range []string{envTable, envStream, envPodName, "AWS_REGION"} {
		if _, ok := env[name]; !ok {
			t.Errorf("the Deployment does not set %s", name)
		}
	}
	env[envPodName] = d.Metadata.Name + "-7d9f-x2x4q" // what the downward API gives
	s, err := loadSettings(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the service refuses the Deployment's environment: %v", err)
	}
	if len(c.Lifecycle) != 0 {
		t.Errorf("lifecycle %v: the service drains on SIGTERM; a hook would run before it, and the image has no CLI nor shell", c.Lifecycle)
	}
	if grace := time.Duration(d.Spec.Template.Spec.Grace) * time.Second; grace < s.stopBudget() {
		t.Errorf("terminationGracePeriodSeconds %v does not cover the service's stop, %v", grace, s.stopBudget())
	}

	_, port, err := net.SplitHostPort(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Ports) != 1 || strconv.Itoa(c.Ports[0].ContainerPort) != port {
		t.Fatalf("ports %+v: want the one the service serves on, %s", c.Ports, port)
	}
	probe := c.ReadinessProbe.HTTPGet
	if probe.Path != pathReady || probe.Port != c.Ports[0].Name {
		t.Errorf("readinessProbe GET %s on port %q, want %s on %q", probe.Path, probe.Port, pathReady, c.Ports[0].Name)
	}
	ann := d.Spec.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port || ann["prometheus.io/path"] != pathMetrics {
		t.Errorf("scrape annotations %v, want port %s and path %s", ann, port, pathMetrics)
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
	metric := scaledObjectMetric(t)
	if metric != "shardlease_workers_wanted" || !names[metric] {
		t.Errorf("query %q: want the workers-wanted gauge; the library exports %v", tr.Metadata["query"], names)
	}
	if !strings.Contains(tr.Metadata["query"], `stream="`+envValue(t, envStream)+`"`) {
		t.Errorf("query %q does not select the Deployment's stream %s", tr.Metadata["query"], envValue(t, envStream))
	}
}

// scaledObjectMetric returns the metric the ScaledObject's query reads.
func scaledObjectMetric(t *testing.T) string {
	t.Helper()
	var s scaledObject
	decodeOne(t, "scaledobject.yaml", &s)
	if len(s.Spec.Triggers) == 0 {
		t.Fatal("the ScaledObject has no trigger")
	}
	return regexp.MustCompile(`shardlease_[a-z_]+`).FindString(s.Spec.Triggers[0].Metadata["query"])
}

// envValue returns the value the Deployment gives the variable name.
func envValue(t *testing.T, name string) string {
	t.Helper()
	var d deployment
	decodeOne(t, "deployment.yaml", &d)
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("the Deployment does not set %s", name)
	return ""
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
