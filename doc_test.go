package shardlease_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layoutPage is the page whose Layout section lists the module's files:
// contributors need it, users do not.
const layoutPage = "docs/contributing.md"

// readmeMaxLines is the README's length limit: what a user needs, no more.
const readmeMaxLines = 300

// layoutTable returns the rows of the Layout table of layoutPage: its first
// column's backquoted paths, and the whole row text, by path.
func layoutTable(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(layoutPage))
	require.NoError(t, err)
	text := string(b)
	start := strings.Index(text, "\n## Layout\n")
	require.GreaterOrEqual(t, start, 0, "%s has no Layout section", layoutPage)
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
	require.NotEmpty(t, rows, "the Layout section of %s has no table", layoutPage)
	return rows
}

// The contributors' Layout table names every non-test file of the root
// package, and every file it names exists: a file added or renamed without
// a line in the table fails here.
func TestContributingLayoutListsEveryRootFile(t *testing.T) {
	rows := layoutTable(t)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var root []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			root = append(root, f)
			_, listed := rows[f]
			assert.True(t, listed, "the Layout table of %s does not list %s", layoutPage, f)
		}
	}
	for p := range rows {
		if strings.HasSuffix(p, ".go") && !strings.Contains(p, "/") {
			assert.True(t, slices.Contains(root, p), "the Layout table of %s lists %s, which is not a root file", layoutPage, p)
		}
	}
}

// The Layout table lists every internal package, and says of each whether
// it is part of the library at run time or tooling for tests and the bench.
func TestContributingLayoutTellsRuntimeFromTooling(t *testing.T) {
	rows := layoutTable(t)
	dirs, err := os.ReadDir("internal")
	require.NoError(t, err)
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		p := "internal/" + d.Name()
		row, ok := rows[p]
		if !assert.True(t, ok, "the Layout table of %s does not list %s", layoutPage, p) {
			continue
		}
		runtime, tooling := strings.Contains(row, "runtime"), strings.Contains(row, "tooling")
		assert.True(t, runtime != tooling, "the Layout row of %s must say either runtime or tooling: %s", p, row)
	}
}

// The README holds what a user needs and stays short: at most
// readmeMaxLines lines, with no file-by-file layout (that is the
// contributors' page's).
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	lines := strings.Count(string(b), "\n")
	if !strings.HasSuffix(string(b), "\n") {
		lines++
	}
	assert.LessOrEqual(t, lines, readmeMaxLines, "README.md has %d lines; move detail to a page of docs/ and link it", lines)
	assert.NotContains(t, string(b), "\n## Layout\n", "the Layout table belongs in %s", layoutPage)
	assert.Contains(t, string(b), "]("+layoutPage+")", "README.md does not link %s", layoutPage)
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

// The documentation is README.md and the pages of docs/. The TestDocs tests
// read them as a reader follows them:
//
//   - every relative link, inline ([text](path#anchor)) or a reference
//     definition ([name]: path), names a file or directory that exists;
//   - every anchor, in-page (#anchor) or on another page (page.md#anchor),
//     is the slug of a heading of that page, by GitHub's rules: lower case,
//     spaces to "-", punctuation other than "-" and "_" dropped, and "-1",
//     "-2", ... after a slug seen before;
//   - every ```go block is either a complete Go file (a package clause
//     first), which must build and pass vet as part of a module of its own
//     that requires this one, or is marked a fragment with the info string
//     "go fragment" (```go fragment), which is not compiled;
//   - a complete block whose info string names a file (```go file=orders_test.go)
//     is that file of one package with the page's other named blocks, as a
//     reader copies them into one directory; a package with a _test.go file
//     also passes go test.
//
// Links and anchors inside code (fenced blocks and `spans`) are not links.

// docPages returns README.md and every page of docs/, by path.
func docPages(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "docs/ holds no page")
	pages := map[string]string{}
	for _, p := range append([]string{"README.md"}, paths...) {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		pages[filepath.ToSlash(p)] = string(b)
	}
	return pages
}

// mdLine is a line of a Markdown page outside fenced code blocks.
type mdLine struct {
	n    int // 1-based line number
	text string
}

// codeBlock is a fenced code block of a Markdown page.
type codeBlock struct {
	line int    // the line of its opening fence
	info string // the info string after the fence, e.g. "go fragment"
	body string // its lines, less the fence's indentation
}

// splitMarkdown returns a page's lines outside fenced code blocks, and the
// blocks.
func splitMarkdown(text string) ([]mdLine, []codeBlock) {
	var prose []mdLine
	var blocks []codeBlock
	var open *codeBlock
	var indent, fence string
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if open == nil {
			if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
				indent = line[:len(line)-len(trimmed)]
				fence = trimmed[:3]
				open = &codeBlock{line: i + 1, info: strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1]))}
				continue
			}
			prose = append(prose, mdLine{i + 1, line})
			continue
		}
		if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" ") == "" {
			blocks = append(blocks, *open)
			open = nil
			continue
		}
		open.body += strings.TrimPrefix(line, indent) + "\n"
	}
	return prose, blocks
}

var (
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading    = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	headLink   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	snippetPos = regexp.MustCompile(`(?:(?:\./)?(snippet\d+)/)?([\w.-]+\.go):(\d+)`)
)

// slug is GitHub's anchor for a heading's text.
func slug(text string) string {
	text = headLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a page's headings.
func anchors(text string) map[string]bool {
	prose, _ := splitMarkdown(text)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range prose {
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n)
		} else {
			seen[s] = 1
		}
		out[s] = true
	}
	return out
}

// docLink is a link of a page: its target as written, and where it is.
type docLink struct {
	page   string
	line   int
	target string
}

// relativeLinks returns a page's links that are not URLs.
func relativeLinks(page, text string) []docLink {
	prose, _ := splitMarkdown(text)
	var links []docLink
	for _, l := range prose {
		line := codeSpan.ReplaceAllString(l.text, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if !scheme.MatchString(target) {
				links = append(links, docLink{page, l.n, target})
			}
		}
	}
	return links
}

// brokenLinks returns what is wrong with the relative links and anchors of
// pages (by path, relative to the module root), one line each.
func brokenLinks(pages map[string]string) []string {
	var broken []string
	for page, text := range pages {
		for _, l := range relativeLinks(page, text) {
			file, anchor, _ := strings.Cut(l.target, "#")
			where := fmt.Sprintf("%s:%d: link %q", l.page, l.line, l.target)
			dest := page
			if file != "" {
				dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
				if _, err := os.Stat(dest); err != nil {
					broken = append(broken, fmt.Sprintf("%s: %s does not exist", where, dest))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			target, ok := pages[dest]
			if !ok {
				b, err := os.ReadFile(dest)
				if err != nil || !strings.HasSuffix(dest, ".md") {
					broken = append(broken, fmt.Sprintf("%s: %s is not a Markdown page with headings", where, dest))
					continue
				}
				target = string(b)
			}
			if !anchors(target)[anchor] {
				broken = append(broken, fmt.Sprintf("%s: %s has no heading with the anchor #%s", where, dest, anchor))
			}
		}
	}
	slices.Sort(broken)
	return broken
}

// Every relative link of README.md and docs/ names a file that exists, and
// every anchor a heading of its page.
func TestDocsLinksAndAnchorsResolve(t *testing.T) {
	for _, b := range brokenLinks(docPages(t)) {
		t.Error(b)
	}
}

// The link check sees a missing file, a missing anchor on another page and
// a missing in-page anchor, and passes links it must pass.
func TestDocsLinkCheckFindsBrokenLinks(t *testing.T) {
	pages := map[string]string{
		"README.md": "# shardlease\n\n## Two commands\n\n## Two commands\n\n### `WithMaxAttempts(n)` and [dead letters](doc.go)\n\n" +
			"[ok](#two-commands) [ok](#two-commands-1) [ok](#withmaxattemptsn-and-dead-letters) [ok](doc.go) [ok](https://example.com/#x)\n" +
			"`[code](nowhere.md)` [gone](nowhere.md) [gone](#three-commands) [gone](README.md#two_commands)\n" +
			"```sh\n[fenced](nowhere.md)\n```\n" +
			"[ref]: docs/nowhere.md\n",
	}
	got := brokenLinks(pages)
	assert.Len(t, got, 4, "%s", strings.Join(got, "\n"))
	for _, want := range []string{`"nowhere.md"`, `"#three-commands"`, `"README.md#two_commands"`, `"docs/nowhere.md"`} {
		assert.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }), "no complaint about %s in:\n%s", want, strings.Join(got, "\n"))
	}
}

// Every page of docs/ has a title and a link back to the README, and the
// README's map of the docs links every page.
func TestDocsPagesAreFoundAndLeadBack(t *testing.T) {
	pages := docPages(t)
	for page, text := range pages {
		if page == "README.md" {
			continue
		}
		assert.True(t, strings.HasPrefix(text, "# "), "%s does not start with a title (a \"# \" line)", page)
		assert.Contains(t, text, "](../README.md", "%s has no link back to the README", page)
		assert.Contains(t, pages["README.md"], "]("+page, "README.md does not link %s", page)
	}
}

// goSnippet is a ```go block of a page.
type goSnippet struct {
	page string
	line int // the line of its opening fence
	src  string
	file string // the file it is, from file=NAME in the info string; "" for a package of its own
}

// snippetFile returns the file=NAME of a block's info string fields, or "".
func snippetFile(fields []string) string {
	for _, f := range fields {
		if name, ok := strings.CutPrefix(f, "file="); ok {
			return name
		}
	}
	return ""
}

func (s goSnippet) where() string { return fmt.Sprintf("%s:%d", s.page, s.line) }

// goSnippets returns the ```go blocks of the pages that are not marked
// fragments, and a complaint for each such block that is not a complete Go
// file.
func goSnippets(pages map[string]string) (snippets []goSnippet, complaints []string) {
	for page, text := range pages {
		_, blocks := splitMarkdown(text)
		for _, b := range blocks {
			fields := strings.Fields(b.info)
			if len(fields) == 0 || fields[0] != "go" || slices.Contains(fields[1:], "fragment") {
				continue
			}
			s := goSnippet{page, b.line, b.body, snippetFile(fields[1:])}
			if s.file != "" && (filepath.Base(s.file) != s.file || !strings.HasSuffix(s.file, ".go")) {
				complaints = append(complaints, fmt.Sprintf("%s: file=%s is not the name of a Go file", s.where(), s.file))
				continue
			}
			if _, err := parser.ParseFile(token.NewFileSet(), s.where(), s.src, parser.PackageClauseOnly); err != nil {
				complaints = append(complaints, fmt.Sprintf("%s: a ```go block that is not a complete Go file (%v): mark it ```go fragment", s.where(), err))
				continue
			}
			snippets = append(snippets, s)
		}
	}
	slices.SortFunc(snippets, func(a, b goSnippet) int { return strings.Compare(a.where(), b.where()) })
	slices.Sort(complaints)
	return snippets, complaints
}

// buildSnippets writes each snippet as the one file of a package of a
// module of its own that requires this one (through a replace directive,
// as a user's module requires a release), the named blocks of a page as the
// files of one package, then builds and vets them all, and tests the
// packages that have test files. It returns the go command's complaints,
// if any, at the pages' lines.
func buildSnippets(t *testing.T, snippets []goSnippet) string {
	t.Helper()
	dir := snippetModule(t)
	files, tested := writeSnippets(t, dir, snippets)
	// dir/file:L, or a bare file:L of a test's failure, is line L after
	// the opening fence of the snippet written there.
	atPage := func(out []byte) string {
		return snippetPos.ReplaceAllStringFunc(string(out), func(pos string) string {
			m := snippetPos.FindStringSubmatch(pos)
			s, ok := files[m[1]+"/"+m[2]]
			if m[1] == "" {
				s, ok = files[m[2]]
			}
			l, _ := strconv.Atoi(m[3])
			if !ok {
				return pos
			}
			return fmt.Sprintf("%s:%d", s.page, s.line+l)
		})
	}
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to build the docs' Go blocks")
	// Built into the null device, the go command compiles every package,
	// main or not, and keeps nothing.
	commands := [][]string{{"build", "-o", os.DevNull, "./..."}, {"vet", "./..."}}
	if len(tested) > 0 {
		commands = append(commands, append([]string{"test", "-count=1"}, tested...))
	}
	for _, args := range commands {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Sprintf("go %s: %v\n%s", args[0], err, atPage(out))
		}
	}
	return ""
}

// snippetModule returns a new directory holding the go.mod and go.sum of
// a module that requires this one.
func snippetModule(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	mod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	dir := t.TempDir()
	// This module's requirements, so that the snippets build from the
	// module cache without asking a proxy.
	requires := string(mod[strings.Index(string(mod), "\nrequire"):])
	gomod := "module docsnippets\n\ngo 1.26.0\n\nrequire github.com/shardlease/shardlease v0.0.0\n" + requires +
		"\nreplace github.com/shardlease/shardlease => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	return dir
}

// writeSnippets writes the snippets into packages of dir: snippetNN/snippet.go
// for the NNth snippet, and each named block as its file of the package of
// its page's first named block. It returns the snippets by the paths they
// were written at (and by the bare name of a file written once), and the
// packages with test files, as ./snippetNN.
func writeSnippets(t *testing.T, dir string, snippets []goSnippet) (files map[string]goSnippet, tested []string) {
	t.Helper()
	files = map[string]goSnippet{}
	pageDir := map[string]string{} // the package of a page's named blocks
	named := map[string]int{}      // how many snippets were written under that name
	for i, s := range snippets {
		pkg, name := fmt.Sprintf("snippet%02d", i+1), "snippet.go"
		if s.file != "" {
			if _, ok := pageDir[s.page]; !ok {
				pageDir[s.page] = pkg
			}
			pkg, name = pageDir[s.page], s.file
		}
		path := filepath.Join(dir, pkg, name)
		_, err := os.Stat(path)
		require.True(t, os.IsNotExist(err), "%s: the page names file=%s twice", s.where(), name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(s.src), 0o644))
		files[pkg+"/"+name] = s
		files[name] = s
		named[name]++
		if strings.HasSuffix(name, "_test.go") && !slices.Contains(tested, "./"+pkg) {
			tested = append(tested, "./"+pkg)
		}
	}
	for name, n := range named {
		if n > 1 {
			delete(files, name) // a bare name is ambiguous
		}
	}
	return files, tested
}

// Every ```go block of README.md and docs/ is a complete Go file that
// builds and passes vet against this module, or is marked a fragment.
func TestDocsGoSnippetsBuild(t *testing.T) {
	snippets, complaints := goSnippets(docPages(t))
	for _, c := range complaints {
		t.Error(c)
	}
	require.NotEmpty(t, snippets, "no page has a complete ```go block")
	if testing.Short() {
		t.Skip("builds the docs' Go blocks with the go command")
	}
	if out := buildSnippets(t, snippets); out != "" {
		t.Errorf("the docs' Go blocks do not build:\n%s", out)
	}
}

// The snippet check complains about an unmarked block that is not a whole
// file, leaves fragments and other languages alone, and the build fails on
// a block that does not compile, a main package or another, at its line.
func TestDocsSnippetCheckFindsBrokenSnippets(t *testing.T) {
	page := "```go\nconsumer.Run(ctx)\n```\n\n```go fragment\nconsumer.Run(ctx)\n```\n\n```sh\ngo run .\n```\n\n" +
		"  ```go\n  package main\n\n  func main() { undefined() }\n  ```\n\n" +
		"```go\npackage orders\n\nfunc f() { alsoUndefined() }\n```\n"
	snippets, complaints := goSnippets(map[string]string{"page.md": page})
	require.Len(t, complaints, 1)
	assert.Contains(t, complaints[0], "page.md:1:")
	require.Len(t, snippets, 2)
	assert.Equal(t, "page.md:13", snippets[0].where())
	assert.Equal(t, "page.md:19", snippets[1].where())
	if testing.Short() {
		t.Skip("builds Go blocks with the go command")
	}
	out := buildSnippets(t, snippets)
	assert.Contains(t, out, "page.md:16:15: undefined: undefined", "the go command's complaint, at the page's line")
	assert.Contains(t, out, "page.md:22:12: undefined: alsoUndefined", "the go command's complaint, at the page's line")
}

// A page's named blocks are the files of one package, and its tests run:
// a failing one is reported at the page's line. A name that is no Go file
// is refused.
func TestDocsSnippetCheckRunsNamedFiles(t *testing.T) {
	page := "```go file=sum.go\npackage sum\n\n// Sum adds.\nfunc Sum(a, b int) int { return a - b }\n```\n\n" +
		"```go file=sum_test.go\npackage sum\n\nimport \"testing\"\n\nfunc TestSum(t *testing.T) {\n" +
		"\tif got := Sum(2, 3); got != 5 {\n\t\tt.Errorf(\"Sum(2, 3) = %d\", got)\n\t}\n}\n```\n\n" +
		"```go file=../escape.go\npackage sum\n```\n"
	snippets, complaints := goSnippets(map[string]string{"page.md": page})
	require.Len(t, complaints, 1)
	assert.Contains(t, complaints[0], "page.md:20: file=../escape.go is not the name of a Go file")
	require.Len(t, snippets, 2)
	assert.Equal(t, "sum.go", snippets[0].file)
	if testing.Short() {
		t.Skip("tests Go blocks with the go command")
	}
	out := buildSnippets(t, snippets)
	assert.Contains(t, out, "go test:", "built and vetted as one package, then tested")
	assert.Contains(t, out, "page.md:15: Sum(2, 3) = -1", "the test's failure, at the page's line")
}
