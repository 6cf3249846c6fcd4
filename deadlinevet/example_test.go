package deadlinevet_test

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"

	"github.com/deadlinekit/deadlinekit/deadlinevet"
)

// Run the analyzer over a package, as deadlinevet ./... does: a handler that calls
// its downstream with http.Get has its caller's deadline at hand, and drops it.
func Example() {
	gopath, _ := filepath.Abs("testdata")
	pkgs, err := packages.Load(&packages.Config{
		Mode: packages.LoadAllSyntax,
		Dir:  filepath.Join(gopath, "src", "example"),
		Env:  append(os.Environ(), "GO111MODULE=off", "GOPATH="+gopath, "GOFLAGS="),
	}, ".")
	if err != nil {
		fmt.Println(err)
		return
	}
	graph, err := checker.Analyze([]*analysis.Analyzer{deadlinevet.Analyzer}, pkgs, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for act := range graph.All() {
		for _, d := range act.Diagnostics {
			pos := act.Package.Fset.Position(d.Pos)
			fmt.Printf("%s:%d: %s: %s\n", filepath.Base(pos.Filename), pos.Line, d.Category, d.Message)
			for _, f := range d.SuggestedFixes {
				fmt.Println("  fix:", f.Message)
			}
		}
	}
	// Output:
	// example.go:11: noctx: http.Get sends no context where r.Context() is at hand: the call outlives its caller's deadline; build the request with http.NewRequestWithContext(r.Context(), ...) and send it with Do
}
