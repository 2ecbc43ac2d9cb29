// Package foreign reads the rows of other Kinesis consumer libraries
// tables: how kinsumer, vmware-go-kcl-v2 and the Java KCL lay out a shard's
// progress, and how one item becomes a row that shardlease can copy.
package foreign

// Row is one row of a foreign table as Import reads it.
type Row struct {
	Shard       string
	Checkpoint  string // as shardlease writes it, or the raw value when Skip is set
	SubSequence int64
	Parents     []string
	Skip        string // why the row is not copied; empty to copy it
	NoProgress  bool   // skipped because the source holds no progress for the shard
	Epoch       int64  // KCL multi-stream: the stream's creation epoch
}
