package emulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// maxNameLen is the longest name both DynamoDB tables and Kinesis streams
// accept.
const maxNameLen = 128

var (
	nameCounter atomic.Uint64
	nameSalt    = newSalt()
)

func newSalt() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b) // never fails on supported platforms
	return hex.EncodeToString(b)
}

// UniqueName returns a name, unique on this machine for every call, that is
// valid both as a DynamoDB table name and as a Kinesis stream name: prefix,
// with characters other than a-z, A-Z, 0-9, '_', '.' and '-' replaced by '-'
// and shortened if need be, then "-", the process id, a random salt and a
// counter. At most 128 characters.
func UniqueName(prefix string) string {
	suffix := fmt.Sprintf("-%d-%s-%d", os.Getpid(), nameSalt, nameCounter.Add(1))
	b := []byte(prefix)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		b = []byte("test")
	}
	if room := maxNameLen - len(suffix); len(b) > room {
		b = b[:room]
	}
	return string(b) + suffix
}

// createStreamPoll is how often CreateStream checks the stream's status.
const createStreamPoll = 20 * time.Millisecond

// CreateStream creates a Kinesis stream with the given number of shards and
// waits until it is ACTIVE, or until ctx is done (give ctx a deadline; the
// shared kinesalite makes streams ACTIVE at once).
func CreateStream(ctx context.Context, client *kinesis.Client, name string, shards int32) error {
	if shards < 1 {
		return fmt.Errorf("emulator: create stream %q with %d shards: a stream needs at least 1 shard", name, shards)
	}
	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{
		StreamName: aws.String(name),
		ShardCount: aws.Int32(shards),
	}); err != nil {
		return fmt.Errorf("emulator: create stream %q: %w", name, err)
	}
	ticker := time.NewTicker(createStreamPoll)
	defer ticker.Stop()
	for {
		out, err := client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		var notFound *types.ResourceNotFoundException
		switch {
		case errors.As(err, &notFound):
			// Not visible yet; poll again.
		case err != nil:
			return fmt.Errorf("emulator: wait for stream %q to become ACTIVE: %w", name, err)
		case out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive:
			return nil
		}
		select {
		case <-ctx.Done():
			status := "unknown"
			if out != nil && out.StreamDescriptionSummary != nil {
				status = string(out.StreamDescriptionSummary.StreamStatus)
			}
			return fmt.Errorf("emulator: stream %q still %s: %w", name, status, ctx.Err())
		case <-ticker.C:
		}
	}
}
