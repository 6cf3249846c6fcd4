package docscheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the module's root, where README.md is.
const root = "../.."

// TestDocsCompile type-checks every ```go block of README.md and docs/*.md.
func TestDocsCompile(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var blocks []block
	for _, f := range files {
		md, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		abs, err := filepath.Abs(f) // errors then name the file wherever they are built
		if err != nil {
			t.Fatal(err)
		}
		bs, err := extract(abs, md)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	if len(blocks) == 0 {
		t.Fatal("no ```go blocks found")
	}
	if out, err := vet(t, blocks); err != nil {
		t.Fatalf("%d blocks: %v\n%s", len(blocks), err, out)
	}
}

// TestBrokenBlockFails shows that the check fails for a block that does not
// compile, and names the block's file and line, and passes the others, all in one
// build.
func TestBrokenBlockFails(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, md string
		fails    bool
	}{
		{"fragment", "text\n\n<!-- go: func(mux *http.ServeMux) -->\n```go\nh := deadlinekit.NewHandler(mux) // unused, used for it\n```\n", false},
		{"returns", "<!-- go: func(ctx context.Context, err error) (any, error) -->\n```go\nreturn nil, deadlinekit.GRPCError(ctx, err)\n```\n", false},
		{"whole", "```go\npackage main\n\nfunc main() {}\n```\n", false},
		{"not-go", "```sh\ngo run ./nothing here\n```\n\n```\nanything\n```\n", false},
		{"undefined", "<!-- go: func(mux *http.ServeMux) -->\n```go\nh := deadlinekit.NewHandlr(mux)\n```\n", true},
		{"free-name", "```go\nh := deadlinekit.NewHandler(mux)\n```\n", true},
		{"syntax", "```go\nh := deadlinekit.NewHandler(\n```\n", true},
		{"whole-broken", "```go\npackage main\n\nfunc main() { undefined() }\n```\n", true},
		{"imports", "<!-- go: func(mux *http.ServeMux) -->\n```go\nimport (\n\t\"net/http\"\n\n\t\"github.com/deadlinekit/deadlinekit\"\n)\n\nh := deadlinekit.NewHandler(mux)\n```\n", false},
		{"imports-unused", "```go\nimport \"github.com/deadlinekit/deadlinekit/hedge\"\n\nx := 1\n```\n", true},
		{"imports-line", "```go\nimport \"fmt\"\n\nfmt.Println(undefinedName)\n```\n", true},
		{"info-string", "```golang title=x\nh := deadlinekit.NewHandlr(nil)\n```\n", true},
		{"wrong-result", "<!-- go: func(ctx context.Context, err error) -->\n```go\nreturn nil, deadlinekit.GRPCError(ctx, err)\n```\n", true},
	}
	var blocks []block
	for _, c := range cases {
		bs, err := extract(c.name+".md", []byte(c.md))
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	out, err := vet(t, blocks)
	if err == nil {
		t.Fatalf("the build of the broken blocks succeeded:\n%s", out)
	}
	t.Logf("the build's report:\n%s", out)
	for _, c := range cases {
		if got := strings.Contains(out, c.name+".md:"); got != c.fails {
			t.Errorf("%s: reported %v, want %v\n%s", c.name, got, c.fails, out)
		}
	}
	for _, at := range []string{"undefined.md:3:", "imports-line.md:4:", "imports-unused.md:2:"} {
		if !strings.Contains(out, at) {
			t.Errorf("an error is not reported at its Markdown line %s:\n%s", at, out)
		}
	}
}

// TestUnclosedBlock: a fence left open is an error, not a block silently dropped.
func TestUnclosedBlock(t *testing.T) {
	if _, err := extract("open.md", []byte("```go\nx := 1\n")); err == nil {
		t.Fatal("an unclosed block was accepted")
	}
}

// vet writes blocks into a directory inside the module (so that its packages
// resolve) and type-checks them with one go vet. It returns the output.
func vet(t *testing.T, blocks []block) (string, error) {
	t.Helper()
	dir, err := os.MkdirTemp(".", "_blocks") // "_": no ./... pattern matches it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dirs, err := write(dir, blocks)
	if err != nil {
		t.Fatal(err)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"vet"}
	for _, d := range dirs {
		args = append(args, "./"+filepath.ToSlash(d))
	}
	cmd := exec.Command(goCmd, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
