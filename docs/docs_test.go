package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/ota"
)

// root is the repository, seen from this package's directory.
const root = ".."

// vocabulary lists where the contract's strings are declared: string
// constants whose declared type is one of these names, or (for untyped
// constants) whose name starts with one of them.
var vocabulary = struct {
	dirs  []string
	kinds []string
}{
	dirs:  []string{"ota"},
	kinds: []string{"Phase", "Result", "Code", "Compression", "Slot", "SlotState"},
}

// contract reads every page of docs/contract.
func contract(t *testing.T) string {
	t.Helper()
	pages, err := filepath.Glob("contract/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no contract pages: %v", err)
	}
	var b strings.Builder
	for _, p := range pages {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestContractNamesEveryString: a state, result or code added to the code
// without a word in the contract fails here.
func TestContractNamesEveryString(t *testing.T) {
	doc := contract(t)
	consts := vocabularyConsts(t)
	for _, kind := range vocabulary.kinds {
		if len(consts[kind]) == 0 {
			t.Errorf("no %s constants found in %v: has the vocabulary moved? update this test", kind, vocabulary.dirs)
		}
	}
	for kind, values := range consts {
		for _, v := range values {
			if !strings.Contains(doc, "`"+v+"`") {
				t.Errorf("%s %q is defined in the code but not in docs/contract/ (as `%s`)", kind, v, v)
			}
		}
	}
}

// vocabularyConsts parses the vocabulary's declarations (not the tests) and
// returns their string values by kind.
func vocabularyConsts(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, dir := range vocabulary.dirs {
		for _, c := range constants(t, filepath.Join(root, dir)) {
			kind := constKind(c.typ, c.name)
			if kind == "" || c.lit.Kind != token.STRING {
				continue
			}
			v, err := strconv.Unquote(c.lit.Value)
			if err != nil || v == "" {
				continue
			}
			if !slices.Contains(out[kind], v) {
				out[kind] = append(out[kind], v)
			}
		}
	}
	return out
}

// decls parses the Go files of dir, leaving out tests, and returns their
// top-level declarations.
func decls(t *testing.T, dir string) []ast.Decl {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []ast.Decl
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f.Decls...)
	}
	return out
}

// constant is a constant declared with a literal value.
type constant struct {
	name string
	typ  ast.Expr // nil when untyped
	lit  *ast.BasicLit
}

// constants returns the constants of dir's non-test files that have a literal value.
func constants(t *testing.T, dir string) []constant {
	t.Helper()
	var out []constant
	for _, decl := range decls(t, dir) {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					out = append(out, constant{name: name.Name, typ: vs.Type, lit: lit})
				}
			}
		}
	}
	return out
}

// constKind is the vocabulary kind of a constant: its declared type, or the
// prefix of its name when it is untyped.
func constKind(typ ast.Expr, name string) string {
	if id, ok := typ.(*ast.Ident); ok {
		if slices.Contains(vocabulary.kinds, id.Name) {
			return id.Name
		}
		return ""
	}
	if typ != nil {
		return ""
	}
	for _, k := range vocabulary.kinds {
		if rest, ok := strings.CutPrefix(name, k); ok && rest != "" && unicode.IsUpper(rune(rest[0])) {
			return k
		}
	}
	return ""
}

// TestContractNamesEveryExitCode: each exit code the vocabulary declares has
// its row in the exit code table of docs/contract/commands.md.
func TestContractNamesEveryExitCode(t *testing.T) {
	page, err := os.ReadFile("contract/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, c := range constants(t, filepath.Join(root, vocabulary.dirs[0])) {
		if !strings.HasPrefix(c.name, "Exit") || c.lit.Kind != token.INT {
			continue
		}
		n++
		if !strings.Contains(string(page), "\n| "+c.lit.Value+" |") {
			t.Errorf("exit code %s (%s) has no row in the exit code table of docs/contract/commands.md", c.lit.Value, c.name)
		}
	}
	if n < 5 {
		t.Errorf("found %d Exit constants in %s: has the vocabulary moved? update this test", n, vocabulary.dirs[0])
	}
}

// TestContractNamesEveryReportField: every JSON field of the status snapshot,
// the event and the progress message is named in docs/contract/formats.md.
func TestContractNamesEveryReportField(t *testing.T) {
	page, err := os.ReadFile("contract/formats.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, span := range regexp.MustCompile("`[^`]+`").FindAllString(stripCode(string(page)), -1) {
		for _, w := range regexp.MustCompile(`[a-z0-9_]+`).FindAllString(span, -1) {
			named[w] = true
		}
	}
	fields := map[string]bool{}
	for _, typ := range []reflect.Type{reflect.TypeFor[ota.Status](), reflect.TypeFor[ota.Event](), reflect.TypeFor[ota.Progress]()} {
		jsonFields(typ, fields)
	}
	if len(fields) < 20 {
		t.Fatalf("found only %d report fields", len(fields))
	}
	for f := range fields {
		if !named[f] {
			t.Errorf("report field %q is sent by devices but not named in docs/contract/formats.md", f)
		}
	}
}

// TestContractNamesEveryJournalKey: the journal's top-level keys are listed
// in docs/contract/installing.md, so an operator reading a journal knows them.
func TestContractNamesEveryJournalKey(t *testing.T) {
	page, err := os.ReadFile("contract/installing.md")
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeFor[agent.State]()
	var n int
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		n++
		if !strings.Contains(string(page), "`"+name+"`") {
			t.Errorf("journal key %q is written by the agent but not listed in docs/contract/installing.md", name)
		}
	}
	if n < 10 {
		t.Fatalf("found only %d journal keys", n)
	}
}

// jsonFields collects the JSON names of typ's fields, through pointers, maps,
// slices and nested structs; time.Time is a value.
func jsonFields(typ reflect.Type, into map[string]bool) {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Map || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[time.Time]() {
		return
	}
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" {
			jsonFields(f.Type, into)
			continue
		}
		if name == "" {
			name = f.Name
		}
		into[name] = true
		jsonFields(f.Type, into)
	}
}

// TestDesignNamesEveryPackage: design.md's folder table has one row for
// every directory with Go code (tests alone count: packaging), no row for anything else, in path order,
// so a new package comes with a sentence on what it is for and the table
// reads as the tree does.
func TestDesignNamesEveryPackage(t *testing.T) {
	page, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(page), "<!-- packages -->")
	table, _, ok2 := strings.Cut(table, "<!-- /packages -->")
	if !ok || !ok2 {
		t.Fatal("design.md: no <!-- packages --> … <!-- /packages --> table")
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	var rows []string
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		rows = append(rows, m[1])
	}
	var dirs []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		if dir != "." && !slices.Contains(dirs, filepath.ToSlash(dir)) {
			dirs = append(dirs, filepath.ToSlash(dir))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		if !slices.Contains(rows, d) {
			t.Errorf("package %s has no row in docs/design.md's folder table", d)
		}
	}
	for _, r := range rows {
		if !slices.Contains(dirs, r) {
			t.Errorf("docs/design.md's folder table has a row for %s, which holds no Go package", r)
		}
	}
	if !slices.IsSorted(rows) {
		t.Errorf("docs/design.md's folder table is not in path order: %v", rows)
	}
}

// TestContractNamesEveryConfigKey: the parser refuses unknown keys, so the
// keys it accepts are exactly the toml tags of config.Config.
func TestContractNamesEveryConfigKey(t *testing.T) {
	page, err := os.ReadFile("contract/config.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := tomlKeys(reflect.TypeFor[config.Config](), "")
	if len(keys) < 10 {
		t.Fatalf("found only %d config keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		if !strings.Contains(string(page), "`"+k+"`") {
			t.Errorf("config key %q is accepted by the parser but not documented in docs/contract/config.md (as `%s`)", k, k)
		}
	}
}

// tomlKeys lists the dotted keys a struct accepts; tables recurse.
func tomlKeys(typ reflect.Type, prefix string) []string {
	var keys []string
	for f := range typ.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		key := prefix + tag
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		// A struct that reads itself from text (a duration) is a value, not a table.
		if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(textUnmarshaler) {
			keys = append(keys, tomlKeys(ft, key+".")...)
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

var textUnmarshaler = reflect.TypeFor[interface{ UnmarshalText([]byte) error }]()

// TestContractNamesEverySubcommand: every subcommand the command tables of
// otad, otactl and otasim dispatch to appears in docs/contract/commands.md.
func TestContractNamesEverySubcommand(t *testing.T) {
	page, err := os.ReadFile("contract/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range []struct {
		name, dir string
		least     int // fewer found: the table changed shape
	}{
		{"otad", "device", 3},
		{"otactl", "operator", 3},
		{"otasim", "sim", 1},
	} {
		names := subcommands(t, filepath.Join(root, prog.dir))
		if len(names) < prog.least {
			t.Fatalf("%s: found only subcommands %v: has its command table changed shape? update this test", prog.name, names)
		}
		for _, n := range names {
			if !strings.Contains(string(page), "`"+prog.name+" "+n) {
				t.Errorf("%s %s is a subcommand but docs/contract/commands.md does not show `%s %s…`", prog.name, n, prog.name, n)
			}
		}
	}
}

// subcommands returns the string keys of the map literal(s) inside the
// declaration named "commands" (a variable or a function returning the table).
func subcommands(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	for _, decl := range decls(t, dir) {
		var body ast.Node
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.Name == "commands" && d.Recv == nil {
				body = d.Body
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				if vs, ok := spec.(*ast.ValueSpec); ok && slices.ContainsFunc(vs.Names, func(n *ast.Ident) bool { return n.Name == "commands" }) {
					body = vs
				}
			}
		}
		if body == nil {
			continue
		}
		ast.Inspect(body, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if _, isMap := cl.Type.(*ast.MapType); !isMap {
				return true
			}
			for _, el := range cl.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				if lit, ok := kv.Key.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						names = append(names, s)
					}
				}
			}
			return false
		})
	}
	return names
}

// mdLink matches inline Markdown links and images: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinksResolve: every relative link in the docs and the README points at
// a file of the repository, and every #anchor at a heading of that file.
func TestLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("contract/*.md")
	pages = append(append(pages, more...), filepath.Join(root, "README.md"))
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "shared/SPEC") || strings.Contains(string(data), "QEMU.md") {
			t.Errorf("%s: links to the project's shared notes, which a clone does not have", page)
		}
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(string(data)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: %v", page, target, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			body, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s: link %q: %v", page, target, err)
				continue
			}
			if !slices.Contains(anchors(string(body)), anchor) {
				t.Errorf("%s: link %q: no heading with anchor #%s in %s", page, target, anchor, path)
			}
		}
	}
}

// stripCode drops fenced code blocks, whose brackets are not links.
func stripCode(s string) string {
	var b strings.Builder
	in := false
	for line := range strings.Lines(s) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line)
		}
	}
	return b.String()
}

// anchors returns the GitHub-style anchors of a page's headings.
func anchors(s string) []string {
	var out []string
	for line := range strings.Lines(stripCode(s)) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestNoSpecCitations: the first design document is not in the repository,
// so nothing tracked may cite its sections; comments point at docs/ instead.
func TestNoSpecCitations(t *testing.T) {
	out, err := exec.Command("git", "-C", root, "grep", "-n", "-I", "-E", "SPEC[ ]§").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
			return // git grep: no match
		}
		t.Skipf("git grep: %v (not a git checkout)", err)
	}
	// The pattern's brackets keep this file from matching itself.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		t.Errorf("%s: cites the first design document; point at docs/contract/*.md", line)
	}
}

// TestDesignLinksHold: each program's row in design.md's links table is
// true of its build: `go list -deps ./cmd/PROGRAM` holds none of the
// packages the row says it never links (a module folder stands for
// everything under it).
func TestDesignLinksHold(t *testing.T) {
	page, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(page), "<!-- links -->")
	table, _, ok2 := strings.Cut(table, "<!-- /links -->")
	if !ok || !ok2 {
		t.Fatal("design.md: no <!-- links --> … <!-- /links --> table")
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (.+) \\|$")
	rows := row.FindAllStringSubmatch(table, -1)
	if len(rows) != 3 {
		t.Fatalf("design.md's links table has %d program rows, want otad, otactl and otasim", len(rows))
	}
	const module = "github.com/otad/otad"
	name := regexp.MustCompile("`([^`]+)`")
	for _, r := range rows {
		out, err := exec.Command("go", "list", "-C", root, "-deps", "./cmd/"+r[1]).Output()
		if err != nil {
			t.Fatalf("go list -deps ./cmd/%s: %v", r[1], err)
		}
		deps := strings.Fields(string(out))
		for _, m := range name.FindAllStringSubmatch(r[2], -1) {
			never := m[1]
			if !strings.Contains(never, ".") {
				never = module + "/" + never
			}
			for _, d := range deps {
				if d == never || strings.HasPrefix(d, never+"/") {
					t.Errorf("design.md says %s never links %s, but it links %s", r[1], m[1], d)
				}
			}
		}
	}
}
