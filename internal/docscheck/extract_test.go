package docscheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// block is one ```go block of a Markdown file.
type block struct {
	file string // the Markdown file, as errors name it
	line int    // the line of the block's first line of code
	sig  string // the fragment's function signature, from <!-- go: ... -->
	code string
}

var sigComment = regexp.MustCompile(`^\s*<!--\s*go:\s*(.*?)\s*-->\s*$`)

// extract returns the ```go blocks of md, named file in errors.
func extract(file string, md []byte) ([]block, error) {
	lines := strings.Split(string(md), "\n")
	var blocks []block
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(fence, "```"))
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s:%d: unclosed code block", file, start)
		}
		if f := strings.Fields(lang); len(f) == 0 || f[0] != "go" && f[0] != "golang" {
			continue
		}
		b := block{file: file, line: start + 1, sig: "func()", code: strings.Join(lines[start:i], "\n")}
		if start >= 2 {
			if m := sigComment.FindStringSubmatch(lines[start-2]); m != nil {
				b.sig = m[1]
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// whole reports whether b is a complete Go file.
func (b block) whole() bool {
	return strings.HasPrefix(strings.TrimSpace(b.code), "package ")
}

// knownImports maps the package names a fragment may use to their import paths.
var knownImports = map[string]string{
	"context":       "context",
	"errors":        "errors",
	"fmt":           "fmt",
	"io":            "io",
	"log":           "log",
	"net":           "net",
	"http":          "net/http",
	"strings":       "strings",
	"time":          "time",
	"deadlinekit":   "github.com/deadlinekit/deadlinekit",
	"breaker":       "github.com/deadlinekit/deadlinekit/breaker",
	"connectkit":    "github.com/deadlinekit/deadlinekit/connectkit",
	"deadline":      "github.com/deadlinekit/deadlinekit/deadline",
	"dedup":         "github.com/deadlinekit/deadlinekit/dedup",
	"redisstore":    "github.com/deadlinekit/deadlinekit/dedup/redisstore",
	"hedge":         "github.com/deadlinekit/deadlinekit/hedge",
	"otelattr":      "github.com/deadlinekit/deadlinekit/otelattr",
	"propagate":     "github.com/deadlinekit/deadlinekit/propagate",
	"retry":         "github.com/deadlinekit/deadlinekit/retry",
	"shortcircuit":  "github.com/deadlinekit/deadlinekit/shortcircuit",
	"grpc":          "google.golang.org/grpc",
	"codes":         "google.golang.org/grpc/codes",
	"insecure":      "google.golang.org/grpc/credentials/insecure",
	"metadata":      "google.golang.org/grpc/metadata",
	"opentelemetry": "google.golang.org/grpc/stats/opentelemetry",
	"status":        "google.golang.org/grpc/status",
	"emptypb":       "google.golang.org/protobuf/types/known/emptypb",
	"connect":       "connectrpc.com/connect",
	"otelconnect":   "connectrpc.com/otelconnect",
	"redis":         "github.com/redis/go-redis/v9",
	"otel":          "go.opentelemetry.io/otel",
	"propagation":   "go.opentelemetry.io/otel/propagation",
	"otelgrpc":      "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc",
	"otelhttp":      "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp",
}

// imports returns the import paths of the known packages src uses (a name followed
// by a dot; comments and strings are not read).
func imports(src string) []string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	s.Init(fset.AddFile("", -1, len(src)), []byte(src), nil, 0)
	seen := map[string]bool{}
	prev := ""
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.PERIOD && knownImports[prev] != "" {
			seen[knownImports[prev]] = true
		}
		prev = ""
		if tok == token.IDENT {
			prev = lit
		}
	}
	var paths []string
	for p := range seen {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// fragment returns the Go file for a fragment b, in package pkg. A fragment may
// start with its imports, shown to the reader; those it does not name are found
// from the package names it uses. //line comments make the compiler's errors name
// b's Markdown file and lines.
func fragment(b block, pkg string) (string, error) {
	decl, body := splitImports(b)
	var head bytes.Buffer
	fmt.Fprintf(&head, "package %s\n\n", pkg)
	for _, p := range imports(b.sig + "\n" + body.code) {
		if !strings.Contains(decl.code, strconv.Quote(p)) {
			fmt.Fprintf(&head, "import %q\n", p)
		}
	}
	if decl.code != "" {
		head.WriteString(lineDirective(decl) + decl.code + "\n")
	}
	fmt.Fprintf(&head, "\nvar _ = %s {\n", b.sig)
	src := head.String() + lineDirective(body) + body.code + "\n}\n"
	// Use what the fragment declares at its top level, right after the declaration,
	// so that an example may show a value it does not go on to use.
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	if err != nil {
		return src, nil // the build reports the syntax error at its line
	}
	fn, ok := f.Decls[len(f.Decls)-1].(*ast.GenDecl).Specs[0].(*ast.ValueSpec).Values[0].(*ast.FuncLit)
	if !ok {
		return "", fmt.Errorf("%s:%d: the signature %q is not a function", b.file, b.line, b.sig)
	}
	type use struct {
		at    int
		names []string
	}
	var uses []use
	for _, st := range fn.Body.List {
		if names := declared(st); len(names) > 0 {
			uses = append(uses, use{int(st.End()) - 1, names})
		}
	}
	for i := len(uses) - 1; i >= 0; i-- {
		u := uses[i]
		src = src[:u.at] + "; " + blankUse(u.names) + src[u.at:]
	}
	return src, nil
}

// splitImports returns the import declarations b starts with, and the rest.
func splitImports(b block) (decl, body block) {
	lines := strings.Split(b.code, "\n")
	n := 0 // lines of imports
	for n < len(lines) {
		line := strings.TrimSpace(lines[n])
		switch {
		case line == "import (":
			for n++; n < len(lines) && strings.TrimSpace(lines[n]) != ")"; n++ {
			}
			n++
		case strings.HasPrefix(line, "import "):
			n++
		case line == "" && n > 0:
			n++
		default:
			decl, body = b, b
			decl.code = strings.Join(lines[:n], "\n")
			body.code, body.line = strings.Join(lines[n:], "\n"), b.line+n
			return decl, body
		}
	}
	decl, body = b, b
	body.code, body.line = "", b.line+len(lines)
	return decl, body
}

// blankUse returns the statement that uses names: "_, _ = a, b".
func blankUse(names []string) string {
	return strings.Repeat("_, ", len(names)-1) + "_ = " + strings.Join(names, ", ")
}

// declared returns the names st declares, blanks left out.
func declared(st ast.Stmt) []string {
	var ids []*ast.Ident
	switch st := st.(type) {
	case *ast.AssignStmt:
		if st.Tok == token.DEFINE {
			for _, e := range st.Lhs {
				if id, ok := e.(*ast.Ident); ok {
					ids = append(ids, id)
				}
			}
		}
	case *ast.DeclStmt:
		if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				ids = append(ids, s.(*ast.ValueSpec).Names...)
			}
		}
	}
	var names []string
	for _, id := range ids {
		if id.Name != "_" {
			names = append(names, id.Name)
		}
	}
	return names
}

func lineDirective(b block) string {
	return fmt.Sprintf("//line %s:%d\n", b.file, b.line)
}

// write lays blocks out as packages under dir: the fragments of each Markdown file
// in one package, each whole file in a package of its own. It returns the
// packages' directories.
func write(dir string, blocks []block) ([]string, error) {
	var dirs []string
	pkgOf := map[string]string{}
	for i, b := range blocks {
		var name, src string
		if b.whole() {
			name = filepath.Join(dir, fmt.Sprintf("whole%d", i), "main.go")
			src = lineDirective(b) + b.code + "\n"
		} else {
			pkg, ok := pkgOf[b.file]
			if !ok {
				pkg = fmt.Sprintf("frag%d", len(pkgOf))
				pkgOf[b.file] = pkg
			}
			name = filepath.Join(dir, pkg, fmt.Sprintf("f%d.go", i))
			var err error
			if src, err = fragment(b, pkg); err != nil {
				return nil, err
			}
		}
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(name, []byte(src), 0o644); err != nil {
			return nil, err
		}
		if !slices.Contains(dirs, filepath.Dir(name)) {
			dirs = append(dirs, filepath.Dir(name))
		}
	}
	return dirs, nil
}
