// Package foreign knows how other Kinesis consumer libraries lay out their
// DynamoDB tables: twitchscience/kinsumer, vmware/vmware-go-kcl-v2 and the
// Java KCL. It decodes one item of such a table into a Row that holds the
// shard's progress as shardlease writes it, or says why the row is not
// copied. It does no I/O: the caller scans the table, checks the rows
// against the stream and writes them.
//
// Each format's table has exactly one key, a string partition key
// (Format.Key). The rows do not name their stream, except the leases of a
// KCL table in multi-stream mode ("account:stream:epoch:shard"), so the
// caller must check single-stream rows against the stream it imports.
package foreign

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Format names the layout of another library's table.
type Format string

// The formats this package reads.
const (
	// Kinsumer is a kinsumer checkpoint table ("<app>_checkpoints").
	Kinsumer Format = "kinsumer"
	// VMwareKCL is a vmware-go-kcl-v2 lease table (named after the
	// application).
	VMwareKCL Format = "vmware-go-kcl-v2"
	// KCL is a Java KCL lease table, single- or multi-stream.
	KCL Format = "kcl"
)

// Formats returns the formats this package reads, in the order errors and
// the command line list them.
func Formats() []Format {
	return []Format{Kinsumer, VMwareKCL, KCL}
}

// Key returns the string partition key of f's tables, their only key; it
// returns "" for a format this package does not read.
func (f Format) Key() string {
	switch f {
	case Kinsumer:
		return kinsumerKey
	case VMwareKCL:
		return vmwareKey
	case KCL:
		return kclKey
	}
	return ""
}

// Row is one item of a foreign table, in the terms of a shardlease row.
type Row struct {
	// Shard is the shard id (of a multi-stream KCL lease, the part after
	// the last colon).
	Shard string
	// Checkpoint is the shard's progress as shardlease writes it: a
	// sequence number or SHARD_END. When Skip is set it is the source's
	// value as is: "" when the source has none or it is not a string.
	Checkpoint string
	// SubSequence is the sub-sequence inside a KPL aggregate, or -1 for a
	// whole record. Only the KCL records one.
	SubSequence int64
	// Parents are the shard's parents. Decode leaves them empty: a
	// source's parents are not read, since the stream's listing is the one
	// to trust. The caller fills them in from the stream.
	Parents []string
	// Skip says why the row is not copied; it is empty for a row to copy.
	Skip string
	// NoProgress is set, with Skip, when the source holds no progress for
	// the shard: it was never checkpointed, or holds a KCL start position.
	NoProgress bool
	// Epoch is the stream's creation epoch of a multi-stream KCL lease,
	// which tells incarnations of a re-created stream apart; 0 otherwise.
	Epoch int64
}

// Decode reads one item of a table in format. mine is false for an item
// that is no row of stream: a multi-stream KCL lease of another stream, or
// any item when format is not one of Formats. checkShard checks a shard id;
// its error goes into the row's Skip.
func Decode(format Format, item map[string]types.AttributeValue, stream string, checkShard func(id string) error) (r Row, mine bool) {
	switch format {
	case Kinsumer:
		return kinsumerRow(item, checkShard), true
	case VMwareKCL:
		return vmwareRow(item, checkShard), true
	case KCL:
		return kclRow(item, stream, checkShard)
	}
	return Row{}, false
}

// SkipOlderIncarnations marks skipped each row of a shard that another row
// of the same shard has a newer creation epoch for: a lease that a
// multi-stream KCL table kept from before stream was re-created. Rows that
// are skipped already keep their reason. Rows of the other formats all
// have epoch 0 and are left alone.
func SkipOlderIncarnations(rows []Row, stream string) {
	newest := map[string]int64{}
	for _, r := range rows {
		if r.Epoch > newest[r.Shard] {
			newest[r.Shard] = r.Epoch
		}
	}
	for i, r := range rows {
		if r.Skip == "" && r.Epoch < newest[r.Shard] {
			rows[i].Skip = fmt.Sprintf("lease of an older incarnation of stream %s (creation epoch %d; the newest is %d)", stream, r.Epoch, newest[r.Shard])
		}
	}
}

// Sort orders rows by shard id, and the rows of one shard newest
// incarnation first. Rows equal in both keep their order.
func Sort(rows []Row) {
	slices.SortStableFunc(rows, func(a, b Row) int {
		if c := strings.Compare(a.Shard, b.Shard); c != 0 {
			return c
		}
		return cmp.Compare(b.Epoch, a.Epoch)
	})
}
