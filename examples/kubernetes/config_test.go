package main

import (
	"strings"
	"testing"
	"time"
)

// env is a getenv over a map.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// A complete environment gives the service's settings, the optional
// variables their defaults.
func TestSettingsFromTheEnvironment(t *testing.T) {
	s, err := loadSettings(env(map[string]string{envTable: "orders-leases", envStream: "orders", envPodName: "orders-consumer-0"}))
	if err != nil {
		t.Fatal(err)
	}
	want := settings{table: "orders-leases", stream: "orders", owner: "orders-consumer-0",
		leaseDuration: defaultLease, shutdown: defaultShutdown, addr: defaultAddr}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	s, err = loadSettings(env(map[string]string{envTable: "orders-leases", envStream: "orders", envLease: "3s", envShutdown: "1m", envAddr: "127.0.0.1:9000"}))
	if err != nil {
		t.Fatal(err)
	}
	if s.leaseDuration != 3*time.Second || s.shutdown != time.Minute || s.addr != "127.0.0.1:9000" || s.owner != "" {
		t.Errorf("got %+v", s)
	}
	if got := len(s.consumerOptions()); got != 2 {
		t.Errorf("without %s: %d options, want 2 (no owner id: the library's default)", envPodName, got)
	}
}

// Each mistake in the environment is an error that names the variable and
// says what to set, all of them at once.
func TestSettingsNameTheVariableToFix(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want []string
	}{
		{"nothing set", nil, []string{
			"LEASE_TABLE is not set: set it to the DynamoDB table of the leases",
			"STREAM is not set: set it to the name of the Kinesis stream"}},
		{"a bad table name", map[string]string{envTable: "orders leases", envStream: "orders"}, []string{
			`LEASE_TABLE="orders leases" is not a DynamoDB table name`}},
		{"a stream ARN", map[string]string{envTable: "orders-leases", envStream: "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"}, []string{
			`is an ARN: set it to the stream's name, the part after "stream/"`}},
		{"a bad stream name", map[string]string{envTable: "orders-leases", envStream: "orders/eu"}, []string{
			`STREAM="orders/eu" is not a Kinesis stream name`}},
		{"durations without units", map[string]string{envTable: "orders-leases", envStream: "orders", envLease: "10", envShutdown: "-5s"}, []string{
			`LEASE_DURATION="10" is not a positive duration: write it with its unit, such as 10s`,
			`SHUTDOWN_TIMEOUT="-5s" is not a positive duration`}},
		{"an address without a port", map[string]string{envTable: "orders-leases", envStream: "orders", envAddr: "8080"}, []string{
			`HTTP_ADDR="8080": want host:port, such as :8080`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadSettings(env(tc.vars))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}
