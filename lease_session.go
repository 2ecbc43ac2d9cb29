package shardlease

import (
	"context"
)

// Sessions: one heartbeat keeps every lease a worker holds.
//
// A worker with sessions on (WithSessions) keeps one session on its worker
// row ("stream:@owner", the row of WorkerStore.Heartbeat): a generation,
// new at every open, and the row's counter, bumped by every keep. Every
// lease it takes names the session (Lease.Session, Lease.SessionGen), and
// the lease row is written only when its owner changes and for checkpoints:
// no renewal per lease. A taker judges such a lease by its session: the
// session's counter standing still for a lease duration on the taker's own
// clock, or a session that is gone or of another generation. Before it
// takes any lease of a live-looking session it fences the session
// (FenceSession: a delete conditional on the counter it saw), after which no
// keep of that generation succeeds; the holder stops handing records at its
// cut-off, timed from the send of its last successful keep, before any taker
// can have seen the session stand still. A lease moves away from a live
// session only through its holder (a handoff): a worker asking for one
// writes the request on the lease row and mails the lease's key to the
// session (MailSession), and the holder's next keep returns the mail.

// SessionStore is implemented by worker stores that keep sessions (both
// stores of this package do; shardleasetest.RunStoreConformance checks
// the contract below). A worker configured WithSessions needs it;
// without sessions every lease row is renewed by its holder every renew
// interval, as before. Rows a session keeps are written so that a release
// of this package from before sessions reads them as corrupt and never
// takes them: its workers can run beside workers with sessions on, during
// an upgrade and a downgrade, without a second reader.
type SessionStore interface {
	// OpenSession opens a new session on owner's worker row of stream,
	// whatever the row held: a new generation (random, never 0), the
	// counter bumped, no mail, and the holder's lease duration carried by
	// ctx (WithHolderLeaseDuration). A session opened before on the row
	// ends: no KeepSession of its generation succeeds any more. The
	// WorkerStore's Heartbeat and listings see the row as a worker row;
	// a Heartbeat bumps its counter and leaves the session as it is, and
	// every listing returns its Gen and Duration.
	OpenSession(ctx context.Context, stream, owner string) (Worker, error)

	// KeepSession bumps the counter of s's row while the row is there and
	// its generation is still s.Gen, writes the holder's lease duration
	// carried by ctx, and returns the row as written with the mail left
	// since the previous keep (lease keys, each once, sorted), which it
	// clears. A row gone (fenced) or of another generation fails with
	// ErrLeaseLost; the error names the worker row and says which. A keep
	// sent again after a lost reply succeeds again: keeps need no counter.
	// The mail the lost reply carried is gone with it: a worker whose
	// request stays unanswered mails again. s.Gen 0 is no session
	// (ErrInvalidConfig), here and in FenceSession, MailSession and
	// AcquireInSession.
	KeepSession(ctx context.Context, s Worker) (kept Worker, mail []string, err error)

	// ReadSession returns owner's worker row of stream, read eventually
	// consistently (it may be a moment old). A missing row is an error
	// matching ErrLeaseNotFound.
	ReadSession(ctx context.Context, stream, owner string) (Worker, error)

	// FenceSession ends the session s: it deletes s's row if the row's
	// counter and generation still equal s's (a PackedCheckpointStore
	// marks a row that carries packed checkpoints ended instead). ended reports whether s is
	// over now (deleted by this call, or gone or of another generation
	// already): no KeepSession of s.Gen can succeed any more. It is false,
	// with no error, when the row moved past s.Counter: the session lives.
	// A counter no row has (-1) makes it a consistent check that deletes
	// nothing: ended then says whether the session is over.
	// Its answer is read consistently (the condition, and the row as it
	// failed it), so a caller that read the session row eventually, and
	// saw it gone or of another generation, can confirm that with a fence
	// on s.Gen at a counter no row has (-1).
	FenceSession(ctx context.Context, s Worker) (ended bool, err error)

	// MailSession leaves lease in the mail of session s (s.Stream,
	// s.Owner, generation s.Gen) for its holder's next KeepSession. It
	// reports whether it left it; a session gone or of another generation
	// is not an error (false).
	MailSession(ctx context.Context, s Worker, lease LeaseKey) (bool, error)

	// AcquireInSession is Acquire that records on the row that session s
	// keeps the lease (Lease.Session is s.Key(), Lease.SessionGen s.Gen),
	// and carries no lease duration of its own (Lease.Duration is 0: the
	// session's row has the holder's). The owner is s.Owner; s may be a
	// session of another stream's worker rows (a Group's). It does not
	// check that s lives: a lease recorded for a fenced session reads as
	// takeable. Renew, Checkpoint, RewindRow, RequestHandoff, Note and
	// WithdrawHandoff keep the record (a handle that does not show it
	// never writes over it: DynamoStore refuses it); Release (to a handoff's taker too: the taker
	// records its own session by AcquireInSession on the counter the
	// release wrote), Acquire and a tool's take clear it.
	AcquireInSession(ctx context.Context, key LeaseKey, s Worker, observed int64) (Lease, error)
}
