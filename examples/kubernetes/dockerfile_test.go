package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dockerfile is what the test reads of the Dockerfile: its instructions,
// each with its arguments.
type dockerfile [][]string

// readDockerfile reads the Dockerfile beside this file, joining continued
// lines and dropping comments.
func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	var d dockerfile
	for line := range strings.Lines(text) {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			d = append(d, f)
		}
	}
	return d
}

// all returns the arguments of every instruction named in.
func (d dockerfile) all(in string) [][]string {
	var out [][]string
	for _, f := range d {
		if strings.EqualFold(f[0], in) {
			out = append(out, f[1:])
		}
	}
	return out
}

// The Dockerfile copies every file the service builds from (run from the
// repository's root, as its comment says), builds it with the Go of go.mod,
// and runs the binary it built on the port the Deployment names.
func TestDockerfileBuildsTheService(t *testing.T) {
	d := readDockerfile(t)
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(here))
	rel, _ := filepath.Rel(root, here)

	from := d.all("FROM")
	if len(from) != 2 || !strings.HasPrefix(from[0][0], "golang:"+goVersion(t)) {
		t.Errorf("FROM %v: want a golang:%s build stage and a run stage", from, goVersion(t))
	}
	var sources []string
	var copied []string // what the run stage copies from the build stage, and where
	for _, args := range d.all("COPY") {
		if strings.HasPrefix(args[0], "--from=") {
			copied = args[1:]
			continue
		}
		for _, src := range args[:len(args)-1] {
			if m, _ := filepath.Glob(filepath.Join(root, src)); len(m) == 0 {
				t.Errorf("COPY %s: nothing in the repository matches", src)
			}
			sources = append(sources, src)
		}
	}
	for _, file := range buildFiles(t, root) {
		if !slices.ContainsFunc(sources, func(src string) bool { return covers(src, file) }) {
			t.Errorf("%s, which the service builds from, is not copied by any of COPY %v", file, sources)
		}
	}

	out := ""
	for _, args := range d.all("RUN") {
		line := strings.Join(args, " ")
		if m := regexp.MustCompile(`go build .*-o (\S+) \.$`).FindStringSubmatch(line); m != nil {
			out = m[1]
			if !strings.Contains(line, "cd "+filepath.ToSlash(rel)+" ") {
				t.Errorf("RUN %s: want the build in %s", line, rel)
			}
		}
	}
	var entry []string
	if e := d.all("ENTRYPOINT"); len(e) == 1 {
		_ = json.Unmarshal([]byte(strings.Join(e[0], " ")), &entry)
	}
	if out == "" || len(copied) != 2 || copied[0] != out || len(entry) != 1 || entry[0] != copied[1] {
		t.Errorf("the image must run what the build stage built: go build -o %q, COPY --from %q, ENTRYPOINT %q", out, copied, entry)
	}
	_, port, _ := net.SplitHostPort(defaultAddr)
	if e := d.all("EXPOSE"); len(e) != 1 || e[0][0] != port {
		t.Errorf("EXPOSE %v, want the service's port %s", e, port)
	}
}

// covers reports whether the COPY source src copies file; both are
// relative to the repository's root.
func covers(src, file string) bool {
	if strings.HasSuffix(src, "/") {
		return strings.HasPrefix(file, src)
	}
	ok, _ := filepath.Match(src, file)
	return ok
}

// buildFiles returns, relative to root, the files of the shardlease
// modules that building the service reads: their go.mod and go.sum, and
// the Go files of every package it imports.
func buildFiles(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{.Module.Dir}}{{"\t"}}{{.Dir}}{{range .GoFiles}}{{"\t"}}{{.}}{{end}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var files []string
	add := func(path string) {
		if r, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(r, "..") && !slices.Contains(files, r) {
			files = append(files, filepath.ToSlash(r))
		}
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSpace(line), "\t")
		if len(f) < 2 || !strings.HasPrefix(f[0], root) {
			continue // a package of another module, from the module cache
		}
		add(filepath.Join(f[0], "go.mod"))
		add(filepath.Join(f[0], "go.sum"))
		for _, name := range f[2:] {
			add(filepath.Join(f[1], name))
		}
	}
	if len(files) < 10 {
		t.Fatalf("go list named only %v", files)
	}
	return files
}

// goVersion returns the major.minor Go version of this module's go.mod.
func goVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod names no Go version")
	}
	return string(m[1])
}
