package balance

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every role on every event, with no watch and a round that left nothing
// to do; the facts that steer a round's end and a rest are in
// TestNextRoleFacts.
func TestNextRole(t *testing.T) {
	const (
		un = RoleUncoordinated
		q  = RoleQuiet
		w  = RoleWatching
		d  = RoleDeputy
		cu = RoleCatchingUp
		al = RoleAlarmed
		co = RoleCoordinator
	)
	roles := []Role{un, q, w, d, cu, al, co}
	for _, tc := range []struct {
		e    RoleEvent
		want []Role // by role, in the order of roles
	}{
		{e: RoundEnded, want: []Role{un, q, q, q, q, q, q}},
		{e: WokenUp, want: []Role{un, cu, cu, cu, cu, al, co}},
		{e: Led, want: []Role{un, cu, cu, cu, cu, al, co}},
		{e: Named, want: []Role{un, d, d, d, cu, al, co}},
		{e: Unnamed, want: []Role{un, q, w, q, cu, al, co}},
		{e: WatchEnded, want: []Role{un, q, q, d, cu, al, co}},
		{e: Alarm, want: []Role{un, al, al, al, al, al, al}},
		{e: GaveUp, want: []Role{un, q, q, q, q, q, q}},
		{e: Stopped, want: []Role{un, q, q, q, q, q, q}},
	} {
		for i, r := range roles {
			assert.Equal(t, tc.want[i], NextRole(r, tc.e, RoleFacts{}), "%v on event %d", r, tc.e)
		}
	}
}

// A round's end: holding the first lease wins over an alarm, an alarm over
// work left, work over rest; at rest a naming makes a deputy, a watch not
// run out a watcher. The other events that end in a rest pick it so too.
func TestNextRoleFacts(t *testing.T) {
	for _, tc := range []struct {
		r    Role
		e    RoleEvent
		f    RoleFacts
		want Role
	}{
		{RoleQuiet, RoundEnded, RoleFacts{Leading: true, Alarm: true, MoreToDo: true}, RoleCoordinator},
		{RoleAlarmed, RoundEnded, RoleFacts{Alarm: true, MoreToDo: true}, RoleAlarmed},
		{RoleCoordinator, RoundEnded, RoleFacts{MoreToDo: true, Named: true}, RoleCatchingUp},
		{RoleCoordinator, RoundEnded, RoleFacts{Named: true, Watching: true}, RoleDeputy},
		{RoleAlarmed, RoundEnded, RoleFacts{Watching: true}, RoleWatching},
		{RoleCatchingUp, RoundEnded, RoleFacts{}, RoleQuiet},
		{RoleUncoordinated, RoundEnded, RoleFacts{Leading: true}, RoleUncoordinated},
		{RoleDeputy, Unnamed, RoleFacts{Watching: true}, RoleWatching},
		{RoleCoordinator, GaveUp, RoleFacts{Watching: true}, RoleWatching},
		{RoleCoordinator, GaveUp, RoleFacts{Named: true}, RoleDeputy},
		{RoleWatching, WokenUp, RoleFacts{Watching: true}, RoleCatchingUp},
		{RoleDeputy, Named, RoleFacts{Named: true}, RoleDeputy},
	} {
		assert.Equal(t, tc.want, NextRole(tc.r, tc.e, tc.f), "%v on event %d with %+v", tc.r, tc.e, tc.f)
	}
}

// A lead note asks a worker to lead until its next round ends or its role
// changes; no other event asks it.
func TestAskedToLead(t *testing.T) {
	for _, tc := range []struct {
		was, r Role
		e      RoleEvent
		asked  bool
		want   bool
	}{
		{RoleQuiet, RoleCatchingUp, Led, false, true},
		{RoleCatchingUp, RoleCatchingUp, Led, false, true},
		{RoleCatchingUp, RoleCatchingUp, WokenUp, true, true},
		{RoleCatchingUp, RoleCatchingUp, WokenUp, false, false},
		{RoleCatchingUp, RoleCatchingUp, RoundEnded, true, false},
		{RoleCatchingUp, RoleAlarmed, Alarm, true, false},
		{RoleCatchingUp, RoleQuiet, Stopped, true, false},
		{RoleUncoordinated, RoleUncoordinated, Led, false, false},
	} {
		assert.Equal(t, tc.want, AskedToLead(tc.was, tc.r, tc.e, tc.asked), "%v -> %v on event %d, asked %v", tc.was, tc.r, tc.e, tc.asked)
	}
}

func TestRoleString(t *testing.T) {
	var names []string
	for r := RoleUncoordinated; r <= RoleCoordinator+1; r++ {
		names = append(names, r.String())
	}
	assert.Equal(t, "[uncoordinated quiet watching deputy catching up alarmed coordinator unknown]", fmt.Sprint(names))
}
