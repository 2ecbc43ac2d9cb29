package shardlease_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layoutTable returns the rows of the README's Layout table: its first
// column's backquoted paths, and the whole row text, by path.
func layoutTable(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	text := string(b)
	start := strings.Index(text, "\n## Layout\n")
	require.GreaterOrEqual(t, start, 0, "README.md has no Layout section")
	text = text[start+len("\n## Layout\n"):]
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	rows := map[string]string{}
	path := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range path.FindAllStringSubmatch(cells[1], -1) {
			rows[m[1]] = line
		}
	}
	require.NotEmpty(t, rows, "the Layout section has no table")
	return rows
}

// The README's Layout table names every non-test file of the root package,
// and every file it names exists: a file added or renamed without a line
// in the table fails here.
func TestReadmeLayoutListsEveryRootFile(t *testing.T) {
	rows := layoutTable(t)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var root []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			root = append(root, f)
			assert.Contains(t, rows, f, "README.md's Layout table does not list %s", f)
		}
	}
	for p := range rows {
		if strings.HasSuffix(p, ".go") && !strings.Contains(p, "/") {
			assert.True(t, slices.Contains(root, p), "README.md's Layout table lists %s, which is not a root file", p)
		}
	}
}

// The Layout table lists every internal package, and says of each whether
// it is part of the library at run time or tooling for tests and the bench.
func TestReadmeLayoutTellsRuntimeFromTooling(t *testing.T) {
	rows := layoutTable(t)
	dirs, err := os.ReadDir("internal")
	require.NoError(t, err)
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		p := "internal/" + d.Name()
		row, ok := rows[p]
		if !assert.True(t, ok, "README.md's Layout table does not list %s", p) {
			continue
		}
		runtime, tooling := strings.Contains(row, "runtime"), strings.Contains(row, "tooling")
		assert.True(t, runtime != tooling, "the Layout row of %s must say either runtime or tooling: %s", p, row)
	}
}

// Every test that docs/guarantees.md, or the README's Guarantees section,
// names (a trailing * names a family of tests by prefix) exists in the
// module.
func TestReadmeGuaranteesNameRealTests(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	text := string(b)
	start := strings.Index(text, "\n## Guarantees\n")
	require.GreaterOrEqual(t, start, 0, "README.md has no Guarantees section")
	text = text[start+1:]
	if end := strings.Index(text[1:], "\n## "); end >= 0 {
		text = text[:end+1]
	}
	page, err := os.ReadFile(filepath.Join("docs", "guarantees.md"))
	require.NoError(t, err)
	var tests []string
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	require.NoError(t, filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			tests = append(tests, m[1])
		}
		return err
	}))
	testName := regexp.MustCompile("`(Test\\w*)(\\*?)`")
	require.NotEmpty(t, testName.FindAllStringSubmatch(string(page), -1), "docs/guarantees.md names no test")
	for doc, text := range map[string]string{"README.md's Guarantees": text, "docs/guarantees.md": string(page)} {
		for _, m := range testName.FindAllStringSubmatch(text, -1) {
			name, family := m[1], m[2] == "*"
			found := slices.ContainsFunc(tests, func(test string) bool {
				return test == name || family && strings.HasPrefix(test, name)
			})
			assert.True(t, found, "%s names %s%s, but no test is called so", doc, name, m[2])
		}
	}
}
