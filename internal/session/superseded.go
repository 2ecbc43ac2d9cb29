package session

// Superseded reports whether a session whose keep was refused was ended by
// a newer session of the same owner id (its row is there, of another
// generation) rather than fenced by a taker (its row is gone); found and
// rowGen describe the row as the refusal left it, gen is the session's.
//
// A superseded incarnation stops for good and never opens again: a restart
// under its owner id is running. Were it to open again, its open would end
// the restart's session, whose own open would end it in turn, and so on;
// every lease the two touch would keep a moving mark that no taker sees
// stand still, and stay untaken while other workers have room. A fenced
// session opens a new one: nobody else writes its row.
func Superseded(found bool, rowGen, gen int64) bool {
	return found && rowGen != gen
}
