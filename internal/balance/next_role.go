package balance

// Role is what a worker does to coordinate a stream's leases. It changes
// only through NextRole, on the events of the worker's Run loop:
//
//	CatchingUp  -> resting       a round left nothing to do (the watch picks which)
//	resting     -> CatchingUp    a wake or lead note; a shard of its own ended; the first lease adopted
//	resting     -> Deputy        a deputy note names it
//	Deputy      -> resting       its naming ended (it watches on for a while)
//	Watching    -> Quiet         the watch ran out
//	any         -> Alarmed       a look saw the first row stand still or free
//	Alarmed     -> CatchingUp    a round saw the first row move again (or resting)
//	any         -> Coordinator   a round ended with it holding the first lease
//	Coordinator -> CatchingUp    a round ended with the first lease elsewhere (or resting)
//	Coordinator -> resting       it gave the first lease up (it cannot list)
//	any         -> Quiet         it stopped (shutdown or drain)
//
// Quiet, Watching and Deputy are the resting roles; RoleUncoordinated (a
// store without notes) never changes.
type Role int

const (
	// RoleUncoordinated: the store carries no notes, so nobody could wake
	// the worker: it lists at every take tick.
	RoleUncoordinated Role = iota
	// RoleQuiet: it renews only, lists while it holds nothing, and now and
	// then looks at the first lease.
	RoleQuiet
	// RoleWatching: quiet, but it watches the first lease as a deputy would
	// for a while, because its last listing showed no deputy.
	RoleWatching
	// RoleDeputy: a note names it deputy: it watches the coordinator's row.
	RoleDeputy
	// RoleCatchingUp: it lists at every take tick until a round leaves it
	// nothing to do.
	RoleCatchingUp
	// RoleAlarmed: it saw the coordinator's row stand still or free: it
	// lists, and takes the leases it saw stand still at their deadline.
	RoleAlarmed
	// RoleCoordinator: it holds the first readable lease: it lists, takes
	// free leases at once and expired ones at their deadline, names the
	// deputies and wakes the workers below their share.
	RoleCoordinator
)

var roleNames = [...]string{"uncoordinated", "quiet", "watching", "deputy", "catching up", "alarmed", "coordinator"}

// String returns the role's name, as Status shows it.
func (r Role) String() string {
	if r < 0 || int(r) >= len(roleNames) {
		return "unknown"
	}
	return roleNames[r]
}

// Resting reports whether r lists only while the worker holds nothing.
func (r Role) Resting() bool { return r == RoleQuiet || r == RoleWatching || r == RoleDeputy }

// TakesOnExpiry reports whether r takes leases at their deadline.
func (r Role) TakesOnExpiry() bool { return r == RoleCoordinator || r == RoleAlarmed }

// RoleEvent is what happened to a worker, for NextRole.
type RoleEvent int

const (
	// RoundEnded: a take round ended (RoleFacts' Leading, Alarm and
	// MoreToDo say how).
	RoundEnded RoleEvent = iota
	// WokenUp: a wake note, a shard of its own ended, or it adopted the
	// first lease: it lists now.
	WokenUp
	// Led: a lead note: it lists now, and takes as the coordinator does
	// in its round.
	Led
	// Named: a deputy note names it.
	Named
	// Unnamed: the deputy's naming ended (its row moved, or the note
	// changed).
	Unnamed
	// WatchEnded: the watch of a worker that saw no deputy ran out.
	WatchEnded
	// Alarm: a look saw the first lease's row stand still or free.
	Alarm
	// GaveUp: the coordinator handed the first lease over (it cannot list).
	GaveUp
	// Stopped: the worker stopped taking (shutdown or drain).
	Stopped
)

// RoleFacts is what NextRole decides from besides the event: how a round
// ended, and the watch a resting worker keeps.
type RoleFacts struct {
	// Leading: the round ended with this worker holding the first lease.
	// Alarm: it was alarmed and the round did not clear the alarm.
	// MoreToDo: the round left it work (takes, handoffs, a lease it may
	// take soon, a wake's listing time).
	Leading, Alarm, MoreToDo bool
	// Named: a deputy note names it on a row it holds. Watching: its
	// watch, begun when it saw no deputy, has not run out.
	Named, Watching bool
}

// NextRole returns the role a worker in role r enters on event e.
func NextRole(r Role, e RoleEvent, f RoleFacts) Role {
	if r == RoleUncoordinated {
		return r
	}
	switch e {
	case RoundEnded:
		switch {
		case f.Leading:
			return RoleCoordinator
		case f.Alarm:
			return RoleAlarmed
		case f.MoreToDo:
			return RoleCatchingUp
		}
		return rest(f)
	case WokenUp, Led:
		if r.Resting() {
			return RoleCatchingUp
		}
	case Named:
		if r.Resting() {
			return RoleDeputy
		}
	case Unnamed:
		if r == RoleDeputy {
			return rest(f)
		}
	case WatchEnded:
		if r == RoleWatching {
			return RoleQuiet
		}
	case Alarm:
		return RoleAlarmed
	case GaveUp:
		return rest(f)
	case Stopped:
		return RoleQuiet
	}
	return r
}

// rest returns the resting role the watch leaves a worker in.
func rest(f RoleFacts) Role {
	switch {
	case f.Named:
		return RoleDeputy
	case f.Watching:
		return RoleWatching
	}
	return RoleQuiet
}

// AskedToLead reports whether a worker that moved from role was to r on
// event e is asked to lead (to take as the coordinator does in its round);
// asked is whether it was before. A lead note asks it, until its next
// round ends or its role changes; an uncoordinated worker is never asked.
func AskedToLead(was, r Role, e RoleEvent, asked bool) bool {
	if r == RoleUncoordinated {
		return false
	}
	return e == Led || asked && r == was && e != RoundEnded
}
