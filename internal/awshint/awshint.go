// Package awshint recognises AWS SDK errors whose cause a new user cannot
// guess from the SDK's text, and says what to do about them.
package awshint

import (
	"errors"
	"strings"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// NoCredentials is what to do when the SDK found no credentials.
const NoCredentials = "no AWS credentials were found: on AWS, set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run with an IAM role; " +
	"for local emulators any values will do, e.g. AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local"

// NoRegion is what to do when a client has no region.
const NoRegion = "set AWS_REGION, or pass config.WithRegion to config.LoadDefaultConfig; " +
	"for local emulators any region will do, e.g. AWS_REGION=us-east-1"

// IsNoCredentials reports whether err is the SDK's failure to find
// credentials before it sent a request. The SDK has no exported type for it
// (the credential chain wraps its causes with fmt.Errorf), so the stages it
// names in its message are matched, as well as a signing error.
func IsNoCredentials(err error) bool {
	if err == nil {
		return false
	}
	var se *v4.SigningError
	if errors.As(err, &se) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "get identity: get credentials:") ||
		strings.Contains(msg, "failed to refresh cached credentials") ||
		strings.Contains(msg, "failed to retrieve credentials")
}
