package vocab

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/otelattr"
)

// root is the module's root, from this package's directory.
const root = "../.."

// otelattrDecl is one declaration of otelattr/keys.go: a const's name, its value,
// whether it is an attribute.Key, and its doc comment.
type otelattrDecl struct {
	name, value, doc string
	isKey            bool
}

func parseKeys(t *testing.T) []otelattrDecl {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "otelattr", "keys.go"), nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var out []otelattrDecl
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			doc := vs.Doc.Text()
			if doc == "" {
				doc = g.Doc.Text()
			}
			for i, n := range vs.Names {
				var lit *ast.BasicLit
				isKey := false
				switch v := vs.Values[i].(type) {
				case *ast.BasicLit:
					lit = v
				case *ast.CallExpr: // attribute.Key("...")
					lit, isKey = v.Args[0].(*ast.BasicLit), true
				}
				if lit == nil {
					t.Fatalf("otelattr.%s: a value the test cannot read", n.Name)
				}
				val, _ := strconv.Unquote(lit.Value)
				out = append(out, otelattrDecl{name: n.Name, value: val, doc: doc, isKey: isKey})
			}
		}
	}
	return out
}

// TestKeysAreTheTable: otelattr declares exactly the table's attribute keys, in its
// order, and the table's events.
func TestKeysAreTheTable(t *testing.T) {
	var keys, events []string
	for _, d := range parseKeys(t) {
		switch {
		case d.isKey:
			keys = append(keys, d.value)
		case strings.HasSuffix(d.name, "Event"):
			events = append(events, d.value)
		}
	}
	var want []string
	for _, a := range Attributes {
		want = append(want, string(a.Key))
	}
	if !slices.Equal(keys, want) {
		t.Errorf("otelattr's keys:\n%q\nthe table's:\n%q", keys, want)
	}
	if !slices.Equal(events, Events) {
		t.Errorf("otelattr's events %q; the table's %q", events, Events)
	}
}

// TestKeyDocsNameTheirValues: each enumerated attribute's doc names every value
// the table gives it, quoted (in its own doc, or in that of a key it links to).
func TestKeyDocsNameTheirValues(t *testing.T) {
	docs := map[string]string{} // by key and by const name
	for _, d := range parseKeys(t) {
		docs[d.value], docs[d.name] = d.doc, d.doc
	}
	link := regexp.MustCompile(`\[(\w+Key)\]`)
	for _, a := range Attributes {
		doc := docs[string(a.Key)]
		for _, m := range link.FindAllStringSubmatch(doc, -1) {
			doc += docs[m[1]]
		}
		for _, v := range a.Values {
			if !strings.Contains(doc, strconv.Quote(v)) {
				t.Errorf("%s: its doc does not name the value %q", a.Key, v)
			}
		}
	}
}

// TestDocListsTheMetrics: otelattr's doc lists the table's metrics, in order, with
// their kind, unit and note.
func TestDocListsTheMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "otelattr", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "//")); len(f) > 0 && strings.HasPrefix(f[0], "deadlinekit.") {
			got = append(got, strings.Join(f, " "))
		}
	}
	for _, m := range Metrics {
		want = append(want, strings.Join(strings.Fields(fmt.Sprintf("%s %s %s %s", m.Name, m.Kind, m.Unit, m.Note)), " "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("otelattr's doc lists:\n%s\nthe table:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// dottedName is a name of the vocabulary's form in a text: deadlinekit.a.b,
// possibly ending in ".*" for a family of names.
var dottedName = regexp.MustCompile(`\bdeadlinekit(?:\.[a-z][a-z0-9_]*)+(?:\.\*)?`)

// others are names of the same form that are not OpenTelemetry's: the registry
// keys of package internal/rpc.
var others = []string{"deadlinekit.client", "deadlinekit.server"}

// known reports whether name is in the vocabulary: an attribute key, a metric, or
// the prefix of some (written name.*).
func known(name string) bool {
	names := append([]string{otelattr.ScopeName}, others...)
	for _, a := range Attributes {
		names = append(names, string(a.Key))
	}
	for _, m := range Metrics {
		names = append(names, m.Name)
	}
	if prefix, ok := strings.CutSuffix(name, ".*"); ok {
		return slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, prefix+".") })
	}
	return slices.Contains(names, name)
}

// unknownNames returns the names of the vocabulary's form in text that are not in it.
func unknownNames(text string) []string {
	var out []string
	for _, loc := range dottedName.FindAllStringIndex(text, -1) {
		n := text[loc[0]:loc[1]]
		if domain := loc[1] < len(text) && text[loc[1]] == '/'; !domain && !known(n) {
			out = append(out, n)
		}
	}
	return out
}

// TestDocsNameOnlyTheVocabulary: every deadlinekit.* name a Markdown file or a
// library file of the repository mentions is in the table, so that a renamed or
// removed attribute leaves no stale mention behind. Test files are left out: they
// may name what must not be there.
func TestDocsNameOnlyTheVocabulary(t *testing.T) {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "tools", "node_modules", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !strings.HasSuffix(name, ".md") && (!strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range unknownNames(string(b)) {
			t.Errorf("%s names %s, which is not in the vocabulary (internal/vocab)", path, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnknownNames: the check above catches a stale name and lets known ones, and
// families of them, through.
func TestUnknownNames(t *testing.T) {
	for text, want := range map[string][]string{
		"deadlinekit.dedup.outcome and deadlinekit.breaker.*":          nil,
		"see deadlinekit.hedge.sent, in deadlinekit.NewHandler":        nil,
		"the old deadlinekit.retry.attempts and deadlinekit.nothing.*": {"deadlinekit.retry.attempts", "deadlinekit.nothing.*"},
		"github.com/deadlinekit/deadlinekit/dedup":                     nil,
		"deadlinekit-relayed: 1":                                       nil,
	} {
		if got := unknownNames(text); !slices.Equal(got, want) {
			t.Errorf("unknownNames(%q) = %q; want %q", text, got, want)
		}
	}
}
