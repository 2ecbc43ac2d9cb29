package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestImportUsage covers what import checks before it calls
// shardlease.Import. The import itself is tested with the library's
// fixtures.
func TestImportUsage(t *testing.T) {
	awsEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"import", "-from", "old", "-table", "new", "-stream", "s"}, "missing -format"},
		{[]string{"import", "-format", "kcl", "-table", "new", "-stream", "s"}, "missing -from"},
		{[]string{"import", "-format", "kcl", "-from", "old", "-stream", "s"}, "missing -table"},
		{[]string{"import", "-format", "kcl2", "-from", "old", "-table", "new", "-stream", "s"}, `-format "kcl2": use kinsumer, vmware-go-kcl-v2, kcl`},
	} {
		r := runCLI(t, env{}, tc.args...)
		assert.Equal(t, 2, r.code, tc.args)
		assert.Contains(t, r.stderr, tc.want, tc.args)
	}
	r := runCLI(t, env{}, "import", "-h")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "Example:\n\n\tshardlease import")
}
