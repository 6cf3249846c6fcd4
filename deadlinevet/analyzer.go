package deadlinevet

import (
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// The checks, by the name of their flag and of their diagnostics' category.
const (
	CheckNewRoot   = "newroot"
	CheckDetached  = "detached"
	CheckNoCtx     = "noctx"
	CheckRetryLoop = "retryloop"
	CheckSleep     = "sleep"
	// CategoryDirective is the category of a malformed //deadlinevet: comment. It
	// has no flag: a directive that says nothing is always worth a look.
	CategoryDirective = "directive"
)

// defaults is which checks run when no flag says otherwise, as the field
// evaluation (EVALUATION.md) decided: a check whose false positives exceed 10% of
// its findings on real code is off by default.
var defaults = map[string]bool{
	CheckNewRoot:   false, // 1 of 2 findings false
	CheckDetached:  true,  // no findings in the field; no false positive seen
	CheckNoCtx:     true,  // 2 of 2 true
	CheckRetryLoop: true,  // no findings in the field; no false positive seen
	CheckSleep:     false, // 10 of 12 false: deliberate delays in examples, background loops
}

var checkDocs = map[string]string{
	CheckNewRoot:   "report context.Background or context.TODO where a context is at hand",
	CheckDetached:  "report a context cut from its caller that reaches an outbound call",
	CheckNoCtx:     "report an outbound call made without the context at hand",
	CheckRetryLoop: "report a hand-written retry loop around a client that already retries",
	CheckSleep:     "report time.Sleep where a context is at hand",
}

// Analyzer finds lost deadlines: see the package documentation for its checks and
// their flags.
var Analyzer = newAnalyzer()

func newAnalyzer() *analysis.Analyzer {
	a := &analysis.Analyzer{
		Name: "deadlinevet",
		Doc:  doc,
		URL:  "https://pkg.go.dev/github.com/deadlinekit/deadlinekit/deadlinevet",
	}
	enabled := make(map[string]*bool, len(defaults))
	for _, name := range []string{CheckNewRoot, CheckDetached, CheckNoCtx, CheckRetryLoop, CheckSleep} {
		v := defaults[name]
		enabled[name] = &v
		a.Flags.BoolVar(enabled[name], name, v, checkDocs[name])
	}
	a.Run = func(pass *analysis.Pass) (any, error) {
		on := make(map[string]bool, len(enabled))
		for k, v := range enabled {
			on[k] = *v
		}
		run(pass, on)
		return nil, nil
	}
	return a
}

const doc = `finds lost deadlines: code that holds its caller's context yet sends work on without it

Checks, each a flag and a category of its name: newroot (context.Background or
TODO where a context is at hand), detached (a context cut from its caller sent
downstream), noctx (an outbound call without the context), retryloop (a
hand-written retry loop around a client that retries), sleep (time.Sleep where a
context is at hand). //deadlinevet:detached <reason> accepts deliberate
detachment on its statement.`

// scope is one function body: the context it has at hand, if any.
type scope struct {
	fn     ast.Node      // *ast.FuncDecl or *ast.FuncLit
	sig    *ast.FuncType // its signature, for the sleep fix's return
	ctx    string        // the expression that yields the context at hand ("ctx", "r.Context()"); "" if none
	ctxObj types.Object  // the parameter behind ctx
	inGo   bool          // a function literal started by a go statement
}

type checker struct {
	pass  *analysis.Pass
	on    map[string]bool
	file  *ast.File
	dirs  *directives
	flows *flows
	retry *retrying
	stack []ast.Node // the nodes enclosing the one visited, outermost first, itself last
}

func run(pass *analysis.Pass, on map[string]bool) {
	c := &checker{pass: pass, on: on}
	if on[CheckRetryLoop] {
		c.retry = findRetrying(pass)
	}
	for _, f := range pass.Files {
		if ast.IsGenerated(f) {
			continue
		}
		c.file = f
		c.dirs = parseFileDirectives(pass, f)
		c.flows = newFlows()
		c.walk(f)
	}
}

// walk visits one file in source order, keeping the stack of function scopes.
func (c *checker) walk(f *ast.File) {
	var stack []ast.Node
	var scopes []*scope
	cur := func() *scope {
		if len(scopes) == 0 {
			return nil
		}
		return scopes[len(scopes)-1]
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			switch stack[len(stack)-1].(type) {
			case *ast.FuncDecl, *ast.FuncLit:
				scopes = scopes[:len(scopes)-1]
			}
			stack = stack[:len(stack)-1]
			return true
		}
		switch n := n.(type) {
		case *ast.FuncDecl:
			scopes = append(scopes, c.newScope(n, n.Type, nil, false))
		case *ast.FuncLit:
			inGo := false
			if k := len(stack); k >= 2 {
				if call, ok := stack[k-1].(*ast.CallExpr); ok && call.Fun == n {
					_, inGo = stack[k-2].(*ast.GoStmt)
				}
			}
			outer := cur()
			if escapes(stack, n) {
				outer = nil
			}
			scopes = append(scopes, c.newScope(n, n.Type, outer, inGo))
		}
		stack = append(stack, n)
		c.stack = stack
		c.visit(n, cur())
		return true
	})
}

// escapes reports a function literal that its function returns or stores away
// (in a struct, or in a variable it returns): it runs after that function has
// returned, when the context that was at hand may be long gone, so it sees none.
func escapes(stack []ast.Node, lit *ast.FuncLit) bool {
	if len(stack) == 0 {
		return false
	}
	switch p := stack[len(stack)-1].(type) {
	case *ast.ReturnStmt, *ast.CompositeLit, *ast.KeyValueExpr:
		return true
	case *ast.AssignStmt, *ast.ValueSpec:
		var name *ast.Ident
		if a, ok := p.(*ast.AssignStmt); ok {
			for i, r := range a.Rhs {
				if r == lit && i < len(a.Lhs) {
					name, _ = a.Lhs[i].(*ast.Ident)
				}
			}
		} else {
			v := p.(*ast.ValueSpec)
			for i, r := range v.Values {
				if r == lit && i < len(v.Names) {
					name = v.Names[i]
				}
			}
		}
		if name == nil {
			return false
		}
		// the innermost enclosing function's body: is the variable returned?
		for i := len(stack) - 1; i >= 0; i-- {
			var body *ast.BlockStmt
			switch f := stack[i].(type) {
			case *ast.FuncDecl:
				body = f.Body
			case *ast.FuncLit:
				body = f.Body
			}
			if body == nil {
				continue
			}
			returned := false
			ast.Inspect(body, func(n ast.Node) bool {
				if _, ok := n.(*ast.FuncLit); ok {
					return false
				}
				if r, ok := n.(*ast.ReturnStmt); ok {
					for _, e := range r.Results {
						if id, ok := ast.Unparen(e).(*ast.Ident); ok && id.Name == name.Name {
							returned = true
						}
					}
				}
				return !returned
			})
			return returned
		}
	}
	return false
}

func (c *checker) visit(n ast.Node, s *scope) {
	switch n := n.(type) {
	case *ast.AssignStmt:
		c.flows.assign(c, n, s)
	case *ast.ValueSpec:
		c.flows.valueSpec(c, n, s)
	case *ast.CallExpr:
		c.call(n, s)
	case *ast.ExprStmt:
		if c.on[CheckSleep] {
			c.sleep(n, s)
		}
	case *ast.ForStmt, *ast.RangeStmt:
		if c.on[CheckRetryLoop] {
			c.retryLoop(n.(ast.Stmt), s)
		}
	}
}

// newScope works out the context a function has at hand: its first named
// context.Context parameter, else r.Context() of an *http.Request parameter, else
// s.Context() of a gRPC server stream. A function literal with none of these sees
// its enclosing function's; one that declares a context parameter but names it _
// (or leaves it unnamed) has said it does not use one, and has none at hand.
func (c *checker) newScope(fn ast.Node, ft *ast.FuncType, outer *scope, inGo bool) *scope {
	s := &scope{fn: fn, sig: ft, inGo: inGo}
	var reqName, streamName string
	var reqObj, streamObj types.Object
	declared := false
	if ft.Params != nil {
		for _, field := range ft.Params.List {
			t := c.pass.TypesInfo.TypeOf(field.Type)
			switch {
			case isContext(t):
				declared = true
				for _, name := range field.Names {
					if name.Name != "_" && s.ctx == "" {
						s.ctx, s.ctxObj = name.Name, c.pass.TypesInfo.Defs[name]
					}
				}
			case isHTTPRequest(t):
				declared = true
				for _, name := range field.Names {
					if name.Name != "_" && reqName == "" {
						reqName, reqObj = name.Name, c.pass.TypesInfo.Defs[name]
					}
				}
			case isServerStream(t):
				declared = true
				for _, name := range field.Names {
					if name.Name != "_" && streamName == "" {
						streamName, streamObj = name.Name, c.pass.TypesInfo.Defs[name]
					}
				}
			}
		}
	}
	switch {
	case s.ctx != "":
	case reqName != "":
		s.ctx, s.ctxObj = reqName+".Context()", reqObj
	case streamName != "":
		s.ctx, s.ctxObj = streamName+".Context()", streamObj
	case !declared && outer != nil:
		s.ctx, s.ctxObj = outer.ctx, outer.ctxObj
	}
	return s
}

// ctxAt is the context at hand at pos, as source text, or "" when the name that
// yields it is shadowed there (a fix would then mean something else).
func (c *checker) ctxAt(s *scope, pos token.Pos) string {
	if s == nil || s.ctx == "" {
		return ""
	}
	name := s.ctx
	if i := strings.IndexByte(name, '.'); i >= 0 {
		name = name[:i]
	}
	inner := c.pass.Pkg.Scope().Innermost(pos)
	if inner == nil {
		return ""
	}
	if _, obj := inner.LookupParent(name, pos); obj != s.ctxObj {
		return ""
	}
	return s.ctx
}

func (c *checker) call(call *ast.CallExpr, s *scope) {
	if s == nil || s.ctx == "" {
		return
	}
	if c.on[CheckNewRoot] && isNewRoot(c.pass.TypesInfo, call) {
		c.newRoot(call, s)
	}
	if c.on[CheckDetached] {
		c.detached(call, s)
	}
	if c.on[CheckNoCtx] {
		c.noCtx(call, s)
	}
}

// newRootReported says whether the newroot check reports this root (so detached
// need not report it again where it reaches the wire).
func (c *checker) newRootReported(call *ast.CallExpr, s *scope) bool {
	return c.on[CheckNewRoot] && s != nil && s.ctx != "" && !c.dirs.accepts(call.Pos())
}

func (c *checker) newRoot(call *ast.CallExpr, s *scope) {
	if c.dirs.accepts(call.Pos()) || c.nilDefault(call, s) || c.afterDone(call, s) {
		return
	}
	name := calleeName(c.pass.TypesInfo, call)
	d := analysis.Diagnostic{
		Pos:      call.Pos(),
		End:      call.End(),
		Category: CheckNewRoot,
		Message:  name + "() where " + s.ctx + " is at hand: the caller's deadline is lost here; use " + s.ctx,
	}
	if ctx := c.ctxAt(s, call.Pos()); ctx != "" {
		d.SuggestedFixes = append(d.SuggestedFixes, analysis.SuggestedFix{
			Message:   "Use the context at hand",
			TextEdits: []analysis.TextEdit{{Pos: call.Pos(), End: call.End(), NewText: []byte(ctx)}},
		})
		if s.inGo {
			if pkg := c.importName(call); pkg != "" {
				d.Message = name + "() in a goroutine started where " + s.ctx + " is at hand: the caller's deadline is lost here; use " + s.ctx + ", or detach it with " + pkg + ".WithoutCancel and //deadlinevet:detached <reason>"
				d.SuggestedFixes = append(d.SuggestedFixes, analysis.SuggestedFix{
					Message:   "Detach from the caller's cancellation, keeping its values",
					TextEdits: []analysis.TextEdit{{Pos: call.Pos(), End: call.End(), NewText: []byte(pkg + ".WithoutCancel(" + ctx + ")")}},
				})
			}
		}
	}
	c.pass.Report(d)
}

// nilDefault reports `if ctx == nil { ctx = context.Background() }`: a nil
// context is none at hand.
func (c *checker) nilDefault(call *ast.CallExpr, s *scope) bool {
	k := len(c.stack)
	if k < 4 {
		return false
	}
	a, ok := c.stack[k-2].(*ast.AssignStmt)
	if !ok || len(a.Lhs) != 1 || len(a.Rhs) != 1 || ast.Unparen(a.Rhs[0]) != call {
		return false
	}
	id, ok := a.Lhs[0].(*ast.Ident)
	if !ok || c.pass.TypesInfo.ObjectOf(id) != s.ctxObj {
		return false
	}
	for i := k - 3; i >= 0; i-- {
		if ifs, ok := c.stack[i].(*ast.IfStmt); ok {
			return testsNil(c.pass.TypesInfo, ifs.Cond, s.ctxObj, token.EQL)
		}
	}
	return false
}

// afterDone reports a new root made after the function waited for a context
// (the one at hand, or one derived from it) to end (<-ctx.Done(), a select case on it): that context is gone, and
// the work that follows (a graceful shutdown, a cleanup) needs a context of its own.
func (c *checker) afterDone(call *ast.CallExpr, s *scope) bool {
	var body *ast.BlockStmt
	switch fn := s.fn.(type) {
	case *ast.FuncDecl:
		body = fn.Body
	case *ast.FuncLit:
		body = fn.Body
	}
	if body == nil || s.ctxObj == nil {
		return false
	}
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if found || n == nil || n.Pos() >= call.Pos() {
			return false
		}
		u, ok := n.(*ast.UnaryExpr)
		if !ok || u.Op != token.ARROW {
			return true
		}
		done, ok := ast.Unparen(u.X).(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := done.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Done" {
			return true
		}
		// ctx.Done(), or that of a context derived from it (errgroup's)
		found = isContext(c.pass.TypesInfo.TypeOf(sel.X))
		return true
	})
	return found
}

// importName is the name the file uses for the package of call's callee
// (context.Background → "context", or its alias).
func (c *checker) importName(call *ast.CallExpr) string {
	if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
		if id, ok := sel.X.(*ast.Ident); ok {
			if _, ok := c.pass.TypesInfo.Uses[id].(*types.PkgName); ok {
				return id.Name
			}
		}
	}
	return ""
}
