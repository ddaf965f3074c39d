package docscheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// TestDocs checks README.md and docs/*.md: every relative link's file exists
// and every #anchor is a heading of its page; every `make <target>` in code is
// a Makefile target; every `hourglass <subcommand>` in code is a subcommand of
// internal/cli (the command tree of cmd/hourglass); and every docs/*.md(#anchor) named by Go code or the
// Makefile resolves.
func TestDocs(t *testing.T) {
	root := repoRoot(t)
	pages := map[string]string{"README.md": read(t, filepath.Join(root, "README.md"))}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md")
	}
	for _, p := range docs {
		pages["docs/"+filepath.Base(p)] = read(t, p)
	}
	s := site{
		pages: pages,
		exists: func(rel string) bool {
			_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
			return err == nil
		},
		targets:  makeTargets(t, read(t, filepath.Join(root, "Makefile"))),
		cli:      cliTree(t, filepath.Join(root, "internal", "cli")),
		codeRefs: codeDocRefs(t, root),
	}
	for _, p := range s.check() {
		t.Error(p)
	}
}

// TestCheckFindsBreakage proves the checker on pages made to break each rule
// once, beside references that are fine.
func TestCheckFindsBreakage(t *testing.T) {
	s := site{
		pages: map[string]string{
			"README.md": "# Title\n\n## Quick start\n\n## Quick start\n\n" +
				"See [ok](docs/a.md#the-heading-with-code-and-punctuation), [dup](#quick-start-1), " +
				"[web](https://example.com/x.md), [file](go.mod), [gone](docs/missing.md), " +
				"[bad anchor](docs/a.md#nope), [self](#nowhere).\n\n" +
				"```sh\nmake test\nFUZZTIME=10m make fuzz\nmake nosuch\n# Not a heading\n" +
				"go run ./cmd/hourglass sign\nbin/hourglass dead requeue --all\nhourglass dead nosuch\n```\n\n" +
				"Run `hourglass nosuch`, `hourglass peek withdrawals`, `make bench BENCH_ARGS=-quick`.\n",
			"docs/a.md": "# The heading, with `code` and punctuation!\n\n[back](../README.md#quick-start) " +
				"[up](../README.md#not-a-heading)\n",
		},
		exists:  func(rel string) bool { return rel == "go.mod" || rel == "docs" },
		targets: map[string]bool{"test": true, "fuzz": true, "bench": true},
		cli: &command{name: "hourglass", subs: map[string]*command{
			"sign": {name: "sign"},
			"peek": {name: "peek"},
			"dead": {name: "dead", subs: map[string]*command{"requeue": {name: "requeue"}}},
		}},
		codeRefs: []codeRef{{"infra/main.go:56", "docs/a.md"}, {"Makefile:3", "docs/gone.md"}, {"x.go:1", "docs/a.md#nope"}},
	}
	want := []string{
		"Makefile:3: docs/gone.md: no such file",
		"README.md:7: docs/missing.md: no such file",
		"README.md:7: docs/a.md#nope: no heading with that anchor in docs/a.md",
		"README.md:7: #nowhere: no heading with that anchor in README.md",
		"README.md:12: `make nosuch`: not a Makefile target",
		"README.md:16: `hourglass dead nosuch`: not a subcommand of hourglass dead",
		"README.md:19: `hourglass nosuch`: not a subcommand of hourglass",
		"docs/a.md:3: ../README.md#not-a-heading: no heading with that anchor in README.md",
		"x.go:1: docs/a.md#nope: no heading with that anchor in docs/a.md",
	}
	got := s.check()
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestAnchor(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Ledger backends: Redis or DynamoDB", "ledger-backends-redis-or-dynamodb"},
		{"The model checker (`make check-model`)", "the-model-checker-make-check-model"},
		{"`make e2e`: the built functions under the Lambda emulator", "make-e2e-the-built-functions-under-the-lambda-emulator"},
		{"Bootstrap (once per account and region)", "bootstrap-once-per-account-and-region"},
		{"PollerNotRunningAlarm", "pollernotrunningalarm"},
		{"snake_case and a-hyphen", "snake_case-and-a-hyphen"},
		{"A [link](x.md) in it", "a-link-in-it"},
	} {
		if got := anchor(c.heading); got != c.want {
			t.Errorf("anchor(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

// site is what the checker reads: the pages by their path from the repository
// root, and what their references must resolve to.
type site struct {
	pages    map[string]string
	exists   func(rel string) bool
	targets  map[string]bool
	cli      *command
	codeRefs []codeRef
}

// command is a subcommand tree of the hourglass CLI.
type command struct {
	name string
	subs map[string]*command
}

// codeRef is a docs/*.md reference outside the docs, at "file:line".
type codeRef struct{ at, target string }

// page is one parsed Markdown page.
type page struct {
	anchors map[string]bool
	links   []ref // relative link targets, "file#anchor"
	code    []ref // the text of code blocks (a line each) and inline code spans
}

type ref struct {
	line int
	text string
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	headingRe  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkRe     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	codeSpan   = regexp.MustCompile("(`+)(.+?)(`+)")
	schemeRe   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// make, then its first argument that is not a flag or an assignment.
	makeRe = regexp.MustCompile(`(?:^|[\s;&|(])make((?:[ \t]+(?:-\S+|\S+=\S*))*)[ \t]+([^\s=;&|),` + "`" + `'"]+)`)
	// hourglass as a command (bin/hourglass, ./cmd/hourglass), then its words.
	hourglassRe = regexp.MustCompile(`(?:^|[\s/(])hourglass((?:[ \t]+[a-z][a-z0-9-]*)+)`)
)

func parsePage(text string) *page {
	p := &page{anchors: map[string]bool{}}
	seen := map[string]int{}
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			p.code = append(p.code, ref{n, line})
			continue
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			a := anchor(m[2])
			if k, dup := seen[a]; dup {
				seen[a] = k + 1
				a = fmt.Sprintf("%s-%d", a, k+1)
			} else {
				seen[a] = 0
			}
			p.anchors[a] = true
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			if m[1] == m[3] {
				p.code = append(p.code, ref{n, m[2]})
			}
		}
		for _, m := range linkRe.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			if !schemeRe.MatchString(m[1]) {
				p.links = append(p.links, ref{n, m[1]})
			}
		}
	}
	return p
}

// anchor is the id GitHub gives a heading: its text (code spans and link text
// as rendered) in lower case, every character but letters, digits, spaces,
// hyphens and underscores dropped, each space a hyphen.
func anchor(heading string) string {
	text := inlineLink.ReplaceAllString(heading, "$1")
	text = strings.ReplaceAll(text, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// check returns every problem, as "file:line: what".
func (s site) check() []string {
	parsed := map[string]*page{}
	for name, text := range s.pages {
		parsed[name] = parsePage(text)
	}
	var problems []string
	// resolve checks target ("file#anchor", relative to dir) at "at".
	resolve := func(at, dir, self, target string) {
		file, frag, _ := strings.Cut(target, "#")
		rel := self
		if file != "" {
			rel = path.Clean(path.Join(dir, file))
			if _, ok := parsed[rel]; !ok && !s.exists(rel) {
				problems = append(problems, fmt.Sprintf("%s: %s: no such file", at, target))
				return
			}
		}
		if frag == "" || !strings.HasSuffix(rel, ".md") {
			return
		}
		p, ok := parsed[rel]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %s: %s is not one of the checked pages", at, target, rel))
			return
		}
		if !p.anchors[frag] {
			problems = append(problems, fmt.Sprintf("%s: %s: no heading with that anchor in %s", at, target, rel))
		}
	}
	for name, p := range parsed {
		for _, l := range p.links {
			resolve(fmt.Sprintf("%s:%d", name, l.line), path.Dir(name), name, l.text)
		}
		for _, c := range p.code {
			at := fmt.Sprintf("%s:%d", name, c.line)
			for _, m := range makeRe.FindAllStringSubmatch(c.text, -1) {
				if !s.targets[m[2]] {
					problems = append(problems, fmt.Sprintf("%s: `make %s`: not a Makefile target", at, m[2]))
				}
			}
			for _, m := range hourglassRe.FindAllStringSubmatch(c.text, -1) {
				if p := s.cli.problem(strings.Fields(m[1])); p != "" {
					problems = append(problems, at+": "+p)
				}
			}
		}
	}
	for _, r := range s.codeRefs {
		resolve(r.at, ".", "", r.target)
	}
	return problems
}

// problem checks the words after `hourglass`: the first must be a
// subcommand, and so must the next while the command has subcommands.
func (c *command) problem(words []string) string {
	path := c.name
	for _, w := range words {
		if len(c.subs) == 0 {
			return ""
		}
		sub, ok := c.subs[w]
		if !ok {
			return fmt.Sprintf("`%s %s`: not a subcommand of %s", path, w, path)
		}
		c, path = sub, path+" "+w
	}
	return ""
}

// makeTargets reads the Makefile's explicit targets, with $(VAR) in their
// names expanded from the Makefile's simple variables.
func makeTargets(t *testing.T, makefile string) map[string]bool {
	t.Helper()
	vars := map[string]string{}
	varRe := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*[:?]?=\s*(.*?)\s*$`)
	ruleRe := regexp.MustCompile(`^([^\s#=:][^:=]*):(?:[^=]|$)`)
	expand := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	targets := map[string]bool{}
	for _, line := range strings.Split(makefile, "\n") {
		if m := varRe.FindStringSubmatch(line); m != nil {
			vars[m[1]] = m[2]
			continue
		}
		if m := ruleRe.FindStringSubmatch(line); m != nil {
			names := expand.ReplaceAllStringFunc(m[1], func(v string) string { return vars[v[2:len(v)-1]] })
			for _, n := range strings.Fields(names) {
				targets[n] = true
			}
		}
	}
	for _, must := range []string{"run", "test", "help"} {
		if !targets[must] {
			t.Fatalf("read no target %q from the Makefile: the test's Makefile reader is wrong", must)
		}
	}
	return targets
}

// cliTree reads the subcommands of hourglass (internal/cli) from its source: from root,
// each AddCommand argument is a call of a constructor whose cobra.Command
// literal's Use names it. A Use that cannot be read fails the test, so a
// change in how commands are built shows here rather than passing unchecked.
func cliTree(t *testing.T, dir string) *command {
	t.Helper()
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	values := map[string]ast.Expr{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					funcs[d.Name.Name] = d
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					if vs, ok := sp.(*ast.ValueSpec); ok {
						for i, n := range vs.Names {
							if i < len(vs.Values) {
								values[n.Name] = vs.Values[i]
							}
						}
					}
				}
			}
		}
	}
	r := cliReader{fset: fset, funcs: funcs, values: values}
	rootFn, ok := funcs["root"]
	if !ok {
		t.Fatal("internal/cli has no func root")
	}
	cmd, err := r.command(rootFn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.name != "hourglass" || cmd.subs["serve"] == nil {
		t.Fatalf("read the CLI as %q with %d subcommands, no serve: the test's reader is wrong", cmd.name, len(cmd.subs))
	}
	// cobra adds these.
	cmd.subs["help"] = &command{name: "help"}
	cmd.subs["completion"] = &command{name: "completion"}
	return cmd
}

type cliReader struct {
	fset   *token.FileSet
	funcs  map[string]*ast.FuncDecl
	values map[string]ast.Expr
}

// binding is an expression and the parameters it is evaluated under.
type binding struct {
	expr ast.Expr
	env  map[string]binding
}

// command reads the command fn builds, its parameters bound by env.
func (r cliReader) command(fn *ast.FuncDecl, env map[string]binding) (*command, error) {
	c := &command{subs: map[string]*command{}}
	var err error
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if err != nil {
			return false
		}
		switch n := n.(type) {
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Use" && c.name == "" {
				var use string
				if use, err = r.str(binding{n.Value, env}); err != nil {
					err = fmt.Errorf("internal/cli %s: the Use of %s: %w", r.fset.Position(n.Pos()), fn.Name.Name, err)
					return false
				}
				c.name, _, _ = strings.Cut(use, " ")
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "AddCommand" {
				return true
			}
			for _, arg := range n.Args {
				var ident *ast.Ident
				call, ok := arg.(*ast.CallExpr)
				if ok {
					ident, _ = call.Fun.(*ast.Ident)
				}
				if ident == nil || r.funcs[ident.Name] == nil {
					err = fmt.Errorf("internal/cli %s: AddCommand of something other than a call of a func of the package", r.fset.Position(arg.Pos()))
					return false
				}
				sub := r.funcs[ident.Name]
				subEnv := map[string]binding{}
				i := 0
				for _, field := range sub.Type.Params.List {
					for _, name := range field.Names {
						if i < len(call.Args) {
							subEnv[name.Name] = binding{call.Args[i], env}
						}
						i++
					}
				}
				var sc *command
				if sc, err = r.command(sub, subEnv); err != nil {
					return false
				}
				c.subs[sc.name] = sc
			}
			return false
		}
		return true
	})
	if err == nil && c.name == "" {
		err = fmt.Errorf("internal/cli: %s builds a command without a Use", fn.Name.Name)
	}
	return c, err
}

// str evaluates a string expression: literals, +, parameters, package-level
// values and fields of composite literals (op.name of a deadOp{name: ...}).
func (r cliReader) str(b binding) (string, error) {
	switch e := b.expr.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			return strconv.Unquote(e.Value)
		}
	case *ast.ParenExpr:
		return r.str(binding{e.X, b.env})
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			x, err := r.str(binding{e.X, b.env})
			if err != nil {
				return "", err
			}
			y, err := r.str(binding{e.Y, b.env})
			return x + y, err
		}
	case *ast.Ident:
		if v, ok := r.deref(b); ok {
			return r.str(v)
		}
	case *ast.SelectorExpr:
		if lit, ok := r.literal(binding{e.X, b.env}); ok {
			for _, elt := range lit.expr.(*ast.CompositeLit).Elts {
				if kv, ok := elt.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == e.Sel.Name {
						return r.str(binding{kv.Value, lit.env})
					}
				}
			}
		}
	}
	return "", fmt.Errorf("cannot evaluate %T at %s", b.expr, r.fset.Position(b.expr.Pos()))
}

// deref follows an identifier to its parameter binding or package-level value.
func (r cliReader) deref(b binding) (binding, bool) {
	id, ok := b.expr.(*ast.Ident)
	if !ok {
		return b, false
	}
	if v, ok := b.env[id.Name]; ok {
		return v, true
	}
	if v, ok := r.values[id.Name]; ok {
		return binding{v, nil}, true
	}
	return b, false
}

// literal follows identifiers and & to a composite literal.
func (r cliReader) literal(b binding) (binding, bool) {
	for range 10 {
		switch e := b.expr.(type) {
		case *ast.CompositeLit:
			return b, true
		case *ast.UnaryExpr:
			b = binding{e.X, b.env}
		case *ast.Ident:
			v, ok := r.deref(b)
			if !ok {
				return b, false
			}
			b = v
		default:
			return b, false
		}
	}
	return b, false
}

var docRefRe = regexp.MustCompile(`docs/[A-Za-z0-9_.-]+\.md(?:#[A-Za-z0-9_-]+)?`)

// codeDocRefs finds the docs/*.md references in the repository's Go files and
// Makefile.
func codeDocRefs(t *testing.T, root string) []codeRef {
	t.Helper()
	var refs []codeRef
	skip := map[string]bool{".git": true, "node_modules": true, ".cdk": true, "bin": true, "dist": true, "cdk.out": true, "testdata": true}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skip[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") && d.Name() != "Makefile" {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if filepath.ToSlash(rel) == "internal/docscheck/docs_test.go" {
			return nil // its own examples
		}
		for i, line := range strings.Split(read(t, p), "\n") {
			for _, m := range docRefRe.FindAllString(line, -1) {
				refs = append(refs, codeRef{fmt.Sprintf("%s:%d", filepath.ToSlash(rel), i+1), m})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return refs
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
