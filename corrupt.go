package shardlease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// CorruptRow is one row of a listing that could not be decoded.
type CorruptRow struct {
	// Key is the row's lease_key (empty if it has none).
	Key string
	// Err says what is wrong with it; it matches ErrCorruptLease.
	Err error
}

// CorruptRowsError is what a listing (List, ListWithWorkers) returns when
// some rows of the stream cannot be decoded, together with every row that
// could: one corrupt row does not hide the others. It matches
// ErrCorruptLease. A consumer fails at start on it; while running, it leaves
// those rows alone (an Error log and the shardlease.rows.corrupt metric name
// each) and balances the rest.
type CorruptRowsError struct {
	Table, Stream string
	Rows          []CorruptRow
}

func (e *CorruptRowsError) Error() string {
	keys := make([]string, 0, len(e.Rows))
	for _, r := range e.Rows {
		keys = append(keys, fmt.Sprintf("%q", r.Key))
	}
	first := ""
	if len(e.Rows) > 0 {
		first = ": " + bare(e.Rows[0].Err)
	}
	return fmt.Sprintf("shardlease: table %s, stream %s: %d rows cannot be decoded (%s); fix them by hand or delete them%s",
		e.Table, e.Stream, len(e.Rows), strings.Join(keys, ", "), first)
}

// Unwrap returns the rows' errors, each matching ErrCorruptLease.
func (e *CorruptRowsError) Unwrap() []error {
	out := make([]error, 0, len(e.Rows)+1)
	out = append(out, ErrCorruptLease)
	for _, r := range e.Rows {
		out = append(out, r.Err)
	}
	return out
}

func avString(av types.AttributeValue) string {
	if s, ok := av.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// tolerateCorrupt reports whether err only says that some rows are corrupt,
// the listing being otherwise complete; then it logs each such row at Error
// (once per row and run) and counts it in shardlease.rows.corrupt, and the
// take round goes on without them.
//
// It sets co.corrupt to the shards of the stream whose rows are corrupt in
// this listing (nil when it returns false).
func (co *coordinator) tolerateCorrupt(ctx context.Context, err error) bool {
	co.corrupt = nil
	var cre *CorruptRowsError
	if err == nil || ctx.Err() != nil || !errors.As(err, &cre) {
		return false
	}
	c := co.c
	co.corrupt = make(map[string]bool, len(cre.Rows))
	for _, r := range cre.Rows {
		if shard, ok := strings.CutPrefix(r.Key, c.stream+":"); ok && shard != "" {
			co.corrupt[shard] = true
		}
	}
	if co.corruptSeen == nil {
		co.corruptSeen = make(map[string]bool)
	}
	counter, _ := c.ins.meter.Int64Counter("shardlease.rows.corrupt", metric.WithDescription("Rows left alone because they cannot be decoded, counted once per row and run."))
	for _, r := range cre.Rows {
		if co.corruptSeen[r.Key] {
			continue
		}
		co.corruptSeen[r.Key] = true
		c.log.Error("a row cannot be decoded; it is left alone while the others are balanced: fix it by hand or delete it", "row", r.Key, "err", r.Err)
		if counter != nil {
			counter.Add(ctx, 1, c.ins.attrs(attribute.String("row", r.Key)))
		}
	}
	return true
}
