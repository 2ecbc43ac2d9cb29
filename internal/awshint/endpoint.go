package awshint

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Service names an AWS service the library calls, with the environment
// variable that sets its endpoint and the address of its local emulator.
type Service struct {
	Name  string // "Kinesis", "DynamoDB"
	Env   string // "AWS_ENDPOINT_URL_KINESIS"
	Local string // where `shardlease emulators` serves it
	Other string // the name of the other service the library calls
}

// The services the library calls.
var (
	Kinesis  = Service{Name: "Kinesis", Env: "AWS_ENDPOINT_URL_KINESIS", Local: "http://127.0.0.1:4567", Other: "DynamoDB"}
	DynamoDB = Service{Name: "DynamoDB", Env: "AWS_ENDPOINT_URL_DYNAMODB", Local: "http://127.0.0.1:8000", Other: "Kinesis"}
)

// other returns the other service.
func (s Service) other() Service {
	if s.Other == Kinesis.Name {
		return Kinesis
	}
	return DynamoDB
}

// genericEnv sets the endpoint of every service at once.
const genericEnv = "AWS_ENDPOINT_URL"

// Unreachable is what an error says about an endpoint that is not the
// service: nothing listens there, its host has no address, or what answers
// is not the service (an HTTP error whose body the SDK could not decode).
type Unreachable struct {
	// Endpoint is the scheme and host the call went to, e.g.
	// "http://127.0.0.1:4567"; empty when the error does not say.
	Endpoint string
	// Cause says what happened, e.g. "connection refused".
	Cause string
}

// FindUnreachable reports whether err is a call that could not reach its
// service, and what it says about the endpoint. A timeout, throttling or a
// server error of the service itself is not such an error: those may pass.
func FindUnreachable(err error) (Unreachable, bool) {
	if err == nil {
		return Unreachable{}, false
	}
	var dns *net.DNSError
	var resp *smithyhttp.ResponseError
	var de *smithy.DeserializationError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Unreachable{Endpoint: urlOf(err), Cause: "connection refused: nothing listens there"}, true
	case errors.As(err, &dns) && dns.IsNotFound:
		return Unreachable{Endpoint: urlOf(err), Cause: fmt.Sprintf("host %s not found", dns.Name)}, true
	case errors.As(err, &resp) && errors.As(err, &de) && resp.HTTPStatusCode() >= 300 && resp.HTTPStatusCode() < 500:
		// A 5xx page that is not the service's JSON may come from a load
		// balancer or proxy in front of the real service: a passing
		// fault, retried as one.
		ep := ""
		if r := resp.Response; r != nil && r.Response != nil && r.Request != nil {
			ep = origin(r.Request.URL)
		}
		return Unreachable{Endpoint: ep, Cause: fmt.Sprintf("it answered HTTP %d with a body that is not the service's JSON, so it is not the service (another service, a proxy or a web server)", resp.HTTPStatusCode())}, true
	}
	return Unreachable{}, false
}

// urlOf returns the endpoint of the request err failed on, or "".
func urlOf(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return ""
	}
	u, perr := url.Parse(ue.URL)
	if perr != nil {
		return ""
	}
	return origin(u)
}

// names reports whether the endpoint URL v is endpoint (or endpoint is
// unknown and v is set).
func names(v, endpoint string) bool {
	if v == "" {
		return false
	}
	if endpoint == "" {
		return true
	}
	u, err := url.Parse(v)
	return err == nil && origin(u) == endpoint
}

// ServiceOf returns the service an SDK error names, as the SDK spells it
// ("Kinesis", "DynamoDB"), or "".
func ServiceOf(err error) string {
	var oe *smithy.OperationError
	if errors.As(err, &oe) {
		return oe.ServiceID
	}
	return ""
}

// origin returns u's scheme and host.
func origin(u *url.URL) string {
	if u == nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// EndpointHint says, for a call to s that could not reach its endpoint,
// which endpoint it tried, where that endpoint was set, and what to do.
// env looks up an environment variable (os.LookupEnv; tests pass their
// own).
func EndpointHint(s Service, u Unreachable, env func(string) (string, bool)) string {
	if env == nil {
		env = os.LookupEnv
	}
	at := u.Endpoint
	if at == "" {
		at = "its endpoint"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "cannot reach %s at %s: %s; ", s.Name, at, u.Cause)
	own, ownSet := env(s.Env)
	generic, genericSet := env(genericEnv)
	ownSet = ownSet && names(own, u.Endpoint)
	genericSet = genericSet && names(generic, u.Endpoint) && !ownSet
	switch {
	case ownSet:
		fmt.Fprintf(&b, "%s is %s: start %s there (`shardlease emulators` serves it at %s), or set %s to where %s listens, or unset it to call AWS in AWS_REGION",
			s.Env, own, s.Name, s.Local, s.Env, s.Name)
	case genericSet:
		o := s.other()
		fmt.Fprintf(&b, "%s is %s and %s is not set, so %s calls go there too (%s sets the endpoint of every service): set %s to %s's address and %s to %s's (%s and %s for `shardlease emulators`), and unset %s",
			genericEnv, generic, s.Env, s.Name, genericEnv, s.Env, s.Name, o.Env, o.Name, s.Local, o.Local, genericEnv)
	case strings.Contains(u.Endpoint, ".amazonaws.com"):
		fmt.Fprintf(&b, "this is AWS's own endpoint for the region: check AWS_REGION, the network and any proxy (HTTPS_PROXY) between this machine and AWS; for local emulators set %s (%s for `shardlease emulators`)",
			s.Env, s.Local)
	default:
		fmt.Fprintf(&b, "the endpoint was set in code (the client's BaseEndpoint) or in the shared config file (endpoint_url): point it at %s, or set %s (%s for `shardlease emulators`); for AWS itself set no endpoint",
			s.Name, s.Env, s.Local)
	}
	return b.String()
}
