package deadlinevet

import (
	"bytes"
	"go/ast"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
)

func (c *checker) sleep(st *ast.ExprStmt, s *scope) {
	call, ok := st.X.(*ast.CallExpr)
	if !ok || s == nil || s.ctx == "" || len(call.Args) != 1 || !isFunc(c.pass.TypesInfo, call, "time", "Sleep") {
		return
	}
	// In a test, a fake server that sleeps through its caller is how a test
	// plays a slow peer.
	if strings.HasSuffix(c.pass.Fset.File(call.Pos()).Name(), "_test.go") || c.dirs.accepts(call.Pos()) {
		return
	}
	d := analysis.Diagnostic{
		Pos:      call.Pos(),
		End:      call.End(),
		Category: CheckSleep,
		Message: "time.Sleep where " + s.ctx + " is at hand sleeps on after the caller gives up; " +
			"wait in a select on " + s.ctx + ".Done() and a timer",
	}
	if fix, ok := c.sleepFix(st, call, s); ok {
		d.SuggestedFixes = []analysis.SuggestedFix{fix}
	}
	c.pass.Report(d)
}

// sleepFix turns time.Sleep(d) into a select that also ends with the context,
// returning ctx.Err() (or just returning) where the function's results allow it
// mechanically: no results, or zero values then an error last.
func (c *checker) sleepFix(st *ast.ExprStmt, call *ast.CallExpr, s *scope) (analysis.SuggestedFix, bool) {
	ctx := c.ctxAt(s, call.Pos())
	timePkg := c.importName(call)
	if ctx == "" || timePkg == "" {
		return analysis.SuggestedFix{}, false
	}
	ret, ok := c.returnOnDone(s, ctx)
	if !ok {
		return analysis.SuggestedFix{}, false
	}
	src, err := readFile(c.pass, c.pass.Fset.File(st.Pos()).Name())
	if err != nil {
		return analysis.SuggestedFix{}, false
	}
	f := c.pass.Fset.File(st.Pos())
	if f.Offset(st.End()) > len(src) { // the file changed since it was parsed
		return analysis.SuggestedFix{}, false
	}
	lineStart := f.Offset(f.LineStart(f.Line(st.Pos())))
	indent := string(src[lineStart:f.Offset(st.Pos())])
	if strings.TrimLeft(indent, " \t") != "" {
		indent = ""
	}
	dur := string(src[f.Offset(call.Args[0].Pos()):f.Offset(call.Args[0].End())])
	var b bytes.Buffer
	b.WriteString("select {\n")
	b.WriteString(indent + "case <-" + ctx + ".Done():\n")
	b.WriteString(indent + "\t" + ret + "\n")
	b.WriteString(indent + "case <-" + timePkg + ".After(" + dur + "):\n")
	b.WriteString(indent + "}")
	return analysis.SuggestedFix{
		Message:   "Wait in a select that ends with the context",
		TextEdits: []analysis.TextEdit{{Pos: st.Pos(), End: st.End(), NewText: b.Bytes()}},
	}, true
}

// returnOnDone is the statement that leaves the function when the context ends.
func (c *checker) returnOnDone(s *scope, ctx string) (string, bool) {
	if s.sig.Results == nil || len(s.sig.Results.List) == 0 {
		return "return", true
	}
	var types_ []types.Type
	for _, field := range s.sig.Results.List {
		if len(field.Names) > 0 {
			return "", false // named results: which to set is the author's call
		}
		types_ = append(types_, c.pass.TypesInfo.TypeOf(field.Type))
	}
	last := types_[len(types_)-1]
	if !types.Identical(last, types.Universe.Lookup("error").Type()) {
		return "", false
	}
	vals := make([]string, 0, len(types_))
	for _, t := range types_[:len(types_)-1] {
		z := zeroValue(t)
		if z == "" {
			return "", false
		}
		vals = append(vals, z)
	}
	vals = append(vals, ctx+".Err()")
	return "return " + strings.Join(vals, ", "), true
}

// zeroValue is the zero value of t as source text, when it needs no type name.
func zeroValue(t types.Type) string {
	switch u := t.Underlying().(type) {
	case *types.Basic:
		switch {
		case u.Info()&types.IsBoolean != 0:
			return "false"
		case u.Info()&types.IsNumeric != 0:
			return "0"
		case u.Info()&types.IsString != 0:
			return `""`
		}
	case *types.Pointer, *types.Slice, *types.Map, *types.Chan, *types.Signature, *types.Interface:
		if _, isParam := t.(*types.TypeParam); isParam {
			return ""
		}
		return "nil"
	}
	return ""
}
