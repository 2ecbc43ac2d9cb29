package seqnum

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCompare(t *testing.T) {
	ordered := []string{
		"",
		"9",
		"10",
		"0011", // leading zeros do not count
		"49590338271490256608559692538361571095921575989136588898",
		"49590338271490256608559692538361571095921575989136588899",
		"149590338271490256608559692538361571095921575989136588898",
		ShardEnd,
	}
	for i, a := range ordered {
		for j, b := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			assert.Equal(t, want, Compare(a, b), "Compare(%q, %q)", a, b)
		}
	}
}
