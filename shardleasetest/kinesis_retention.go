package shardleasetest

import "time"

// WithRetention makes closed shards age out: a shard closed at least d ago
// is gone, as a real stream's closed shards are once every record in them
// is older than the retention period. It is no longer listed, and
// GetShardIterator and GetRecords on it answer ResourceNotFoundException.
// Children keep naming it as their parent. Records of open shards are kept
// (the fake trims no records). The default, d <= 0, keeps every shard.
func WithRetention(d time.Duration) KinesisOption {
	return func(f *Kinesis) { f.retention = d }
}

// agedOut reports whether s is gone by retention at now. f.mu must be held.
func (f *Kinesis) agedOut(s *shard, now time.Time) bool {
	return f.retention > 0 && !s.open() && now.Sub(s.closedAt) >= f.retention
}
