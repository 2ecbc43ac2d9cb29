// Package crash wraps a lease store and a Kinesis client so that one
// switch makes both fail every call, as when a worker's process dies: no
// release, no final checkpoint.
package crash

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
)

// Store returns s wrapped so that every call fails once sw is flipped. The
// wrapper keeps worker rows (shardlease.WorkerStore) when s has them, and
// notes, sessions and packed checkpoints when it has those too.
func Store(s shardlease.LeaseStore, sw *Switch) shardlease.LeaseStore {
	if ws, ok := s.(shardlease.WorkerStore); ok {
		if ns, ok := s.(shardlease.NoteStore); ok {
			n := noteStore{workerStore{store{s, sw}, ws}, ns}
			if ss, ok := s.(shardlease.SessionStore); ok {
				if ps, ok := s.(shardlease.PackedCheckpointStore); ok {
					return packedStore{sessionStore{n, ss}, ps}
				}
				return sessionStore{n, ss}
			}
			return n
		}
		return workerStore{store{s, sw}, ws}
	}
	return store{s, sw}
}

// Kinesis returns k wrapped so that every call fails once sw is flipped.
func Kinesis(k shardlease.KinesisAPI, sw *Switch) shardlease.KinesisAPI { return kin{k, sw} }

// Switch makes the clients wrapped with it fail every call once flipped,
// like a process that died: nothing it would write afterwards reaches a
// server. The zero value is up.
type Switch struct{ down atomic.Bool }

// Crash flips the switch.
func (s *Switch) Crash() { s.down.Store(true) }

// Down reports whether Crash was called.
func (s *Switch) Down() bool { return s.down.Load() }

// ErrCrashed is what every call through a crashed wrapper returns.
var ErrCrashed = errors.New("worker crashed")

type store struct {
	shardlease.LeaseStore
	sw *Switch
}

func (s store) err() error {
	if s.sw.down.Load() {
		return ErrCrashed
	}
	return nil
}

func (s store) Create(ctx context.Context, k shardlease.LeaseKey, p []string) (bool, error) {
	if err := s.err(); err != nil {
		return false, err
	}
	return s.LeaseStore.Create(ctx, k, p)
}

func (s store) Get(ctx context.Context, k shardlease.LeaseKey) (shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.LeaseStore.Get(ctx, k)
}

func (s store) List(ctx context.Context, stream string) ([]shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.LeaseStore.List(ctx, stream)
}

func (s store) Acquire(ctx context.Context, k shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.LeaseStore.Acquire(ctx, k, owner, observed)
}

func (s store) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.LeaseStore.Renew(ctx, l, e)
}

func (s store) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.LeaseStore.Checkpoint(ctx, l, cp, sub, e)
}

func (s store) Release(ctx context.Context, l shardlease.Lease) (shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.LeaseStore.Release(ctx, l)
}

func (s store) RequestHandoff(ctx context.Context, l shardlease.Lease, taker string) (shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.LeaseStore.RequestHandoff(ctx, l, taker)
}

type kin struct {
	shardlease.KinesisAPI
	sw *Switch
}

func (k kin) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if k.sw.down.Load() {
		return nil, ErrCrashed
	}
	return k.KinesisAPI.ListShards(ctx, in, o...)
}

func (k kin) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if k.sw.down.Load() {
		return nil, ErrCrashed
	}
	return k.KinesisAPI.GetShardIterator(ctx, in, o...)
}

func (k kin) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if k.sw.down.Load() {
		return nil, ErrCrashed
	}
	return k.KinesisAPI.GetRecords(ctx, in, o...)
}

type workerStore struct {
	store
	ws shardlease.WorkerStore
}

func (s workerStore) ListWithWorkers(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	if err := s.err(); err != nil {
		return nil, nil, err
	}
	return s.ws.ListWithWorkers(ctx, stream)
}

// ListWithWorkersEventually passes the call on when the store lists that
// way, and lists consistently otherwise.
func (s workerStore) ListWithWorkersEventually(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	if err := s.err(); err != nil {
		return nil, nil, err
	}
	if el, ok := s.ws.(shardlease.EventualLister); ok {
		return el.ListWithWorkersEventually(ctx, stream)
	}
	return s.ws.ListWithWorkers(ctx, stream)
}

func (s workerStore) Heartbeat(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	if err := s.err(); err != nil {
		return shardlease.Worker{}, err
	}
	return s.ws.Heartbeat(ctx, stream, owner)
}

func (s workerStore) RemoveWorker(ctx context.Context, w shardlease.Worker) (bool, error) {
	if err := s.err(); err != nil {
		return false, err
	}
	return s.ws.RemoveWorker(ctx, w)
}

// noteStore passes notes on (shardlease.NoteStore) for stores that keep
// them and worker rows.
type noteStore struct {
	workerStore
	ns shardlease.NoteStore
}

func (s noteStore) Note(ctx context.Context, l shardlease.Lease, note string) (shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.ns.Note(ctx, l, note)
}

func (s noteStore) GetEventually(ctx context.Context, k shardlease.LeaseKey) (shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.ns.GetEventually(ctx, k)
}

// sessionStore passes sessions on (shardlease.SessionStore) for stores that
// keep them, notes and worker rows.
type sessionStore struct {
	noteStore
	ss shardlease.SessionStore
}

func (s sessionStore) OpenSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	if err := s.err(); err != nil {
		return shardlease.Worker{}, err
	}
	return s.ss.OpenSession(ctx, stream, owner)
}

func (s sessionStore) KeepSession(ctx context.Context, w shardlease.Worker) (shardlease.Worker, []string, error) {
	if err := s.err(); err != nil {
		return shardlease.Worker{}, nil, err
	}
	return s.ss.KeepSession(ctx, w)
}

func (s sessionStore) ReadSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	if err := s.err(); err != nil {
		return shardlease.Worker{}, err
	}
	return s.ss.ReadSession(ctx, stream, owner)
}

func (s sessionStore) FenceSession(ctx context.Context, w shardlease.Worker) (bool, error) {
	if err := s.err(); err != nil {
		return false, err
	}
	return s.ss.FenceSession(ctx, w)
}

func (s sessionStore) MailSession(ctx context.Context, w shardlease.Worker, k shardlease.LeaseKey) (bool, error) {
	if err := s.err(); err != nil {
		return false, err
	}
	return s.ss.MailSession(ctx, w, k)
}

func (s sessionStore) AcquireInSession(ctx context.Context, k shardlease.LeaseKey, w shardlease.Worker, observed int64) (shardlease.Lease, error) {
	if err := s.err(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.ss.AcquireInSession(ctx, k, w, observed)
}

// packedStore passes packed checkpoints on (shardlease.PackedCheckpointStore)
// for stores that keep them and sessions.
type packedStore struct {
	sessionStore
	ps shardlease.PackedCheckpointStore
}

func (s packedStore) KeepPacked(ctx context.Context, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) (shardlease.Worker, []string, error) {
	if err := s.err(); err != nil {
		return shardlease.Worker{}, nil, err
	}
	return s.ps.KeepPacked(ctx, w, put, drop)
}

func (s packedStore) ReadPacked(ctx context.Context, stream, owner string) ([]shardlease.PackedCheckpoint, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.ps.ReadPacked(ctx, stream, owner)
}
