package main

import (
	"fmt"
	"io"
	"strings"
)

// unknownCommand tells that name is no command: with the nearest command
// when one is near enough to be a typo, else with the command names, on
// three lines rather than the whole usage.
func unknownCommand(w io.Writer, name string) {
	if near := nearestCommand(name); near != "" {
		fmt.Fprintf(w, "shardlease: unknown command %q; did you mean %q?\n", name, near)
	} else {
		names := make([]string, 0, len(commands))
		for _, c := range commands {
			names = append(names, c.name)
		}
		fmt.Fprintf(w, "shardlease: unknown command %q; the commands are: %s\n", name, strings.Join(names, ", "))
	}
	fmt.Fprint(w, "Run 'shardlease help' for what each does.\n")
}

// nearestCommand returns the command name nearest to name, or "" when none
// is near enough to be a typo of it (see nearest).
func nearestCommand(name string) string {
	names := make([]string, 0, len(commands))
	for _, c := range commands {
		names = append(names, c.name)
	}
	return nearest(strings.ToLower(strings.TrimLeft(name, "-")), names)
}

// nearest returns the one of names nearest to name, or "" when none is
// near enough to be a typo of it: one that name is a prefix of (two
// letters at least), or one within a third of its letters (and at least
// one) of edits.
func nearest(name string, names []string) string {
	best, bestDist := "", -1
	for _, n := range names {
		if len(name) >= 2 && strings.HasPrefix(n, name) {
			return n
		}
		d := editDistance(name, n)
		if bestDist < 0 || d < bestDist {
			best, bestDist = n, d
		}
	}
	if bestDist >= 0 && bestDist <= max(1, len(best)/3) {
		return best
	}
	return ""
}

// editDistance is the number of letters to insert, delete, replace or swap
// with the next one to turn a into b (optimal string alignment distance).
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
