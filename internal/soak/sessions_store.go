package soak

// The store layers' sessions (shardlease.SessionStore): the outermost
// layer (troubleStore) records fences, counts keeps, checks keeps against
// the fences and crashes a taker halfway; the fault layer of the
// in-process world (faultStore) fails session calls as it fails the
// others; the audit layer next to the MemoryStore (auditStore) records an
// acquire in a session as an acquire.

import (
	"context"
	"time"

	"github.com/shardlease/shardlease"
)

var (
	_ shardlease.SessionStore = (*troubleStore)(nil)
	_ shardlease.SessionStore = (*faultStore)(nil)
	_ shardlease.SessionStore = (*auditStore)(nil)
)

func (t *troubleStore) sessions() shardlease.SessionStore {
	return t.LeaseStore.(shardlease.SessionStore)
}

func (t *troubleStore) OpenSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	return t.sessions().OpenSession(ctx, stream, owner)
}

// KeepSession counts a keep that succeeded, and checks it against the
// fences: a keep of a fenced generation sent after the fence must fail.
func (t *troubleStore) KeepSession(ctx context.Context, w shardlease.Worker) (shardlease.Worker, []string, error) {
	kept, mail, err := t.keep(w, func() (shardlease.Worker, []string, error) { return t.sessions().KeepSession(ctx, w) })
	if err == nil && t.s != nil {
		t.s.units.kept(w.Key(), nil, nil, t.s.meter.on.Load())
	}
	return kept, mail, err
}

// keep makes the keep of w (call), counts it when it succeeded and checks
// it against the fences.
func (t *troubleStore) keep(w shardlease.Worker, call func() (shardlease.Worker, []string, error)) (shardlease.Worker, []string, error) {
	sent := time.Now()
	kept, mail, err := call()
	if err == nil && t.s != nil {
		if t.s.meter.on.Load() {
			t.s.sessAudit.keeps.Add(1)
		}
		t.s.sessAudit.check(holderWrite{op: "keep", by: t.inc.id, key: w.Key(), sess: sessionID{w.Key(), w.Gen}, sent: sent})
	}
	return kept, mail, err
}

func (t *troubleStore) ReadSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	return t.sessions().ReadSession(ctx, stream, owner)
}

// FenceSession records a fence that ended the session, and may crash the
// taker right after it (takerDied).
func (t *troubleStore) FenceSession(ctx context.Context, w shardlease.Worker) (bool, error) {
	ended, err := t.sessions().FenceSession(ctx, w)
	if err == nil && ended && t.s != nil {
		t.s.sessAudit.fence(w)
		if w.Owner != t.inc.consumer.OwnerID() { // not its own session, closed at the end of Run
			t.s.sessAudit.takerFenced()
			t.s.takerDied(t.inc, w)
		}
	}
	return ended, err
}

func (t *troubleStore) MailSession(ctx context.Context, w shardlease.Worker, k shardlease.LeaseKey) (bool, error) {
	return t.sessions().MailSession(ctx, w, k)
}

func (t *troubleStore) AcquireInSession(ctx context.Context, k shardlease.LeaseKey, w shardlease.Worker, observed int64) (shardlease.Lease, error) {
	return t.sessions().AcquireInSession(ctx, k, w, observed)
}

func (s *faultStore) sessions() shardlease.SessionStore { return s.next.(shardlease.SessionStore) }

func (s *faultStore) OpenSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	return storeCall(s.in, "UpdateItem", true, shardlease.Worker{}, func() (shardlease.Worker, error) { return s.sessions().OpenSession(ctx, stream, owner) })
}

func (s *faultStore) KeepSession(ctx context.Context, w shardlease.Worker) (shardlease.Worker, []string, error) {
	type kept struct {
		w    shardlease.Worker
		mail []string
	}
	got, err := storeCall(s.in, "UpdateItem", true, kept{}, func() (kept, error) {
		w, mail, err := s.sessions().KeepSession(ctx, w)
		return kept{w, mail}, err
	})
	return got.w, got.mail, err
}

func (s *faultStore) ReadSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	return storeCall(s.in, "GetItem", false, shardlease.Worker{}, func() (shardlease.Worker, error) { return s.sessions().ReadSession(ctx, stream, owner) })
}

func (s *faultStore) FenceSession(ctx context.Context, w shardlease.Worker) (bool, error) {
	return storeCall(s.in, "DeleteItem", true, false, func() (bool, error) { return s.sessions().FenceSession(ctx, w) })
}

func (s *faultStore) MailSession(ctx context.Context, w shardlease.Worker, k shardlease.LeaseKey) (bool, error) {
	return storeCall(s.in, "UpdateItem", true, false, func() (bool, error) { return s.sessions().MailSession(ctx, w, k) })
}

func (s *faultStore) AcquireInSession(ctx context.Context, k shardlease.LeaseKey, w shardlease.Worker, observed int64) (shardlease.Lease, error) {
	return storeCall(s.in, "UpdateItem", true, shardlease.Lease{}, func() (shardlease.Lease, error) { return s.sessions().AcquireInSession(ctx, k, w, observed) })
}

func (s *auditStore) sessions() shardlease.SessionStore {
	return s.LeaseStore.(shardlease.SessionStore)
}

func (s *auditStore) OpenSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	return s.sessions().OpenSession(ctx, stream, owner)
}

func (s *auditStore) KeepSession(ctx context.Context, w shardlease.Worker) (shardlease.Worker, []string, error) {
	return s.sessions().KeepSession(ctx, w)
}

func (s *auditStore) ReadSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	return s.sessions().ReadSession(ctx, stream, owner)
}

func (s *auditStore) FenceSession(ctx context.Context, w shardlease.Worker) (bool, error) {
	return s.sessions().FenceSession(ctx, w)
}

func (s *auditStore) MailSession(ctx context.Context, w shardlease.Worker, k shardlease.LeaseKey) (bool, error) {
	return s.sessions().MailSession(ctx, w, k)
}

// AcquireInSession is recorded as an acquire: the checkpoints that follow
// are made under its counter.
func (s *auditStore) AcquireInSession(ctx context.Context, k shardlease.LeaseKey, w shardlease.Worker, observed int64) (shardlease.Lease, error) {
	got, err := s.sessions().AcquireInSession(ctx, k, w, observed)
	s.done("acquire", shardlease.Lease{}, false, got, err)
	return got, err
}
