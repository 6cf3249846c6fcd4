package deadlinevet

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// retrying is what, in one package, holds or builds a client that retries on its
// own: variables, struct fields and functions whose value comes from the
// toolkit's retry layer or from gRPC's retry policy, with where that was.
type retrying struct {
	pkg  *types.Package
	info *types.Info
	objs map[types.Object]token.Pos
}

// findRetrying marks, until nothing changes, every object assigned (or, for a
// function, returning) an expression that builds a retrying client.
func findRetrying(pass *analysis.Pass) *retrying {
	r := &retrying{pkg: pass.Pkg, info: pass.TypesInfo, objs: make(map[types.Object]token.Pos)}
	for range 8 {
		changed := false
		mark := func(lhs ast.Expr, rhs ast.Expr) {
			obj := r.lhsObj(lhs)
			if obj == nil {
				return
			}
			if _, ok := r.objs[obj]; ok {
				return
			}
			if pos, ok := r.builds(rhs); ok {
				r.objs[obj] = pos
				changed = true
			}
		}
		for _, f := range pass.Files {
			var funcs []*types.Func
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncDecl:
					fn, _ := pass.TypesInfo.Defs[n.Name].(*types.Func)
					funcs = append(funcs[:0], fn)
				case *ast.AssignStmt:
					markPairs(n.Lhs, n.Rhs, mark)
				case *ast.ValueSpec:
					markPairs(n.Names, n.Values, mark)
				case *ast.CompositeLit:
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if id, ok := kv.Key.(*ast.Ident); ok {
								if v, ok := pass.TypesInfo.Uses[id].(*types.Var); ok && v.IsField() && v.Pkg() == pass.Pkg {
									mark(id, kv.Value)
								}
							}
						}
					}
				case *ast.ReturnStmt:
					if len(funcs) == 1 && funcs[0] != nil && len(n.Results) > 0 {
						if _, ok := r.objs[funcs[0]]; !ok {
							if pos, ok := r.builds(n.Results[0]); ok {
								r.objs[funcs[0]] = pos
								changed = true
							}
						}
					}
				case *ast.FuncLit:
					return false // a literal's returns are not its enclosing function's
				}
				return true
			})
		}
		if !changed {
			break
		}
	}
	return r
}

// lhsObj is the variable or field an assignment or a composite literal's key
// writes.
func (r *retrying) lhsObj(e ast.Expr) types.Object {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		if e.Name == "_" {
			return nil
		}
		if v, ok := r.info.ObjectOf(e).(*types.Var); ok {
			return v
		}
	case *ast.SelectorExpr:
		// Only this package's fields: marking http.Client.Transport would
		// mark every client.
		if sel := r.info.Selections[e]; sel != nil && sel.Kind() == types.FieldVal && sel.Obj().Pkg() == r.pkg {
			return sel.Obj()
		}
	case *ast.StarExpr:
		return r.lhsObj(e.X)
	}
	return nil
}

// builds reports whether e builds (or refers to) a retrying client, and where the
// retrying came from. It looks through calls' arguments (grpc.NewClient(addr,
// opts...), pb.NewFooClient(conn)) but not through a method call's receiver: the
// response of client.Do does not retry.
func (r *retrying) builds(e ast.Expr) (token.Pos, bool) {
	var pos token.Pos
	ast.Inspect(e, func(n ast.Node) bool {
		if pos.IsValid() {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.KeyValueExpr:
			if p, ok := r.builds(n.Value); ok {
				pos = p
			}
			return false
		case *ast.Ident:
			if p, ok := r.objs[r.info.Uses[n]]; ok {
				pos = p
			}
		case *ast.SelectorExpr:
			if sel := r.info.Selections[n]; sel != nil {
				if sel.Kind() == types.FieldVal {
					if p, ok := r.objs[sel.Obj()]; ok {
						pos = p
					}
					return true
				}
				return false // a method value: x.M is not x
			}
		case *ast.CallExpr:
			if r.retryConstructor(n) {
				pos = n.Pos()
				return false
			}
			if f := callee(r.info, n); f != nil {
				if p, ok := r.objs[f]; ok {
					pos = p
					return false
				}
				if f.Type().(*types.Signature).Recv() != nil {
					// a method: look at its arguments only
					for _, a := range n.Args {
						if p, ok := r.builds(a); ok {
							pos = p
							break
						}
					}
					return false
				}
			}
		}
		return true
	})
	return pos, pos.IsValid()
}

// retryConstructor reports a call that puts a retry layer into a client:
// deadlinekit.NewTransport and DialOptions, connectkit.ClientOption (each unless
// told Without(deadlinekit.Retry)), retry.NewTransport, retry.UnaryClientInterceptor,
// connectkit.Retry, and grpc.WithDefaultServiceConfig with a "retryPolicy".
func (r *retrying) retryConstructor(call *ast.CallExpr) bool {
	switch {
	case isFunc(r.info, call, pkgKit, "NewTransport", "DialOptions"),
		isFunc(r.info, call, pkgConnKit, "ClientOption"):
		return !r.withoutRetry(call)
	case isFunc(r.info, call, pkgRetry, "NewTransport", "UnaryClientInterceptor", "StreamClientInterceptor"),
		isFunc(r.info, call, pkgConnKit, "Retry"):
		return true
	case isFunc(r.info, call, pkgGRPC, "WithDefaultServiceConfig"):
		if len(call.Args) == 1 {
			if tv, ok := r.info.Types[call.Args[0]]; ok && tv.Value != nil && tv.Value.Kind() == constant.String {
				return strings.Contains(constant.StringVal(tv.Value), `"retryPolicy"`)
			}
		}
	}
	return false
}

// withoutRetry reports a stack constructor told deadlinekit.Without(..., deadlinekit.Retry, ...).
func (r *retrying) withoutRetry(call *ast.CallExpr) bool {
	found := false
	for _, a := range call.Args {
		ast.Inspect(a, func(n ast.Node) bool {
			w, ok := n.(*ast.CallExpr)
			if !ok || !isFunc(r.info, w, pkgKit, "Without") {
				return true
			}
			for _, l := range w.Args {
				if obj, ok := r.info.Uses[identOf(l)].(*types.Const); ok && obj.Name() == "Retry" && obj.Pkg().Path() == pkgKit {
					found = true
				}
			}
			return false
		})
	}
	return found
}

func identOf(e ast.Expr) *ast.Ident {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return e
	case *ast.SelectorExpr:
		return e.Sel
	}
	return nil
}

// retryLoop reports a loop that calls a retrying client and goes round again on
// that call's error.
func (c *checker) retryLoop(loop ast.Stmt, s *scope) {
	body, cond, loopVars, collection := c.loopParts(loop)
	if body == nil {
		return
	}
	var found bool
	ast.Inspect(body, func(n ast.Node) bool {
		if found {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit, *ast.ForStmt, *ast.RangeStmt:
			return false
		case *ast.AssignStmt:
			if len(n.Rhs) != 1 {
				return true
			}
			call, ok := ast.Unparen(n.Rhs[0]).(*ast.CallExpr)
			if !ok {
				return true
			}
			pos, client := c.retryingCall(call)
			if !client || c.loopFeeds(call, n, body, loopVars, collection) {
				return true
			}
			errObj := errVar(c.pass.TypesInfo, n)
			if errObj == nil || !retriesOn(c.pass.TypesInfo, body, cond, errObj) {
				return true
			}
			found = true
			c.pass.Report(analysis.Diagnostic{
				Pos:      loop.Pos(),
				End:      body.Lbrace,
				Category: CheckRetryLoop,
				Message: fmt.Sprintf("a hand-written retry loop around %s, whose client already retries (%s, line %d): "+
					"the attempts multiply (3 × 3 = 9 calls per request); retry in one layer only",
					calleeName(c.pass.TypesInfo, call), c.retryName(pos), c.pass.Fset.Position(pos).Line),
			})
			return false
		}
		return true
	})
}

// loopParts returns loop's body, its condition (a for loop's), the variables it
// declares (a for loop's init; a range's key and value, when it ranges over a
// collection), and whether it ranges over a collection: each turn another item,
// not another try. A loop of another kind has no body.
func (c *checker) loopParts(loop ast.Stmt) (body *ast.BlockStmt, cond ast.Expr, loopVars []types.Object, collection bool) {
	switch l := loop.(type) {
	case *ast.ForStmt:
		body, cond = l.Body, l.Cond
		if a, ok := l.Init.(*ast.AssignStmt); ok && a.Tok == token.DEFINE {
			for _, e := range a.Lhs {
				if id, ok := e.(*ast.Ident); ok {
					loopVars = append(loopVars, c.pass.TypesInfo.Defs[id])
				}
			}
		}
	case *ast.RangeStmt:
		body = l.Body
		if t := c.pass.TypesInfo.TypeOf(l.X); t != nil {
			if b, ok := t.Underlying().(*types.Basic); !ok || b.Info()&types.IsInteger == 0 {
				collection = true
				for _, e := range []ast.Expr{l.Key, l.Value} {
					if id, ok := e.(*ast.Ident); ok && e != nil {
						loopVars = append(loopVars, c.pass.TypesInfo.ObjectOf(id))
					}
				}
			}
		}
	}
	return body, cond, loopVars, collection
}

// loopFeeds reports whether the loop's variables feed call, made in the
// assignment at, in its arguments or (ranging over a collection) in what the body
// builds before it: then the loop sends another item each turn, not another try.
func (c *checker) loopFeeds(call *ast.CallExpr, at ast.Node, body *ast.BlockStmt, loopVars []types.Object, collection bool) bool {
	for _, v := range loopVars {
		for _, a := range call.Args {
			if usesObj(c.pass.TypesInfo, a, v) {
				return true
			}
		}
		for _, st := range body.List {
			if !collection || st.Pos() >= at.Pos() {
				break
			}
			if usesObj(c.pass.TypesInfo, st, v) {
				return true
			}
		}
	}
	return false
}

// retryName names the retry layer that starts at pos.
func (c *checker) retryName(pos token.Pos) string {
	for _, f := range c.pass.Files {
		if f.Pos() <= pos && pos < f.End() {
			var name string
			ast.Inspect(f, func(n ast.Node) bool {
				if name != "" {
					return false
				}
				if call, ok := n.(*ast.CallExpr); ok && call.Pos() == pos {
					name = calleeName(c.pass.TypesInfo, call)
					if isFunc(c.pass.TypesInfo, call, pkgGRPC, "WithDefaultServiceConfig") {
						name += ` with a "retryPolicy"`
					}
					return false
				}
				return n == nil || (n.Pos() <= pos && pos < n.End())
			})
			if name != "" {
				return name
			}
		}
	}
	return "a retry layer"
}

// retryingCall reports a method call on a retrying client that returns an error,
// and where that client's retrying comes from.
func (c *checker) retryingCall(call *ast.CallExpr) (token.Pos, bool) {
	if c.retry == nil {
		return 0, false
	}
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return 0, false
	}
	f := callee(c.pass.TypesInfo, call)
	if f == nil {
		return 0, false
	}
	sig := f.Type().(*types.Signature)
	if sig.Recv() == nil || sig.Results().Len() == 0 ||
		!types.Identical(sig.Results().At(sig.Results().Len()-1).Type(), types.Universe.Lookup("error").Type()) {
		return 0, false
	}
	return c.retry.builds(sel.X)
}

// errVar is the variable an assignment stores a call's error result in.
func errVar(info *types.Info, a *ast.AssignStmt) types.Object {
	id, ok := a.Lhs[len(a.Lhs)-1].(*ast.Ident)
	if !ok || id.Name == "_" {
		return nil
	}
	obj := info.ObjectOf(id)
	if obj == nil || !types.Identical(obj.Type(), types.Universe.Lookup("error").Type()) {
		return nil
	}
	return obj
}

// retriesOn reports whether a loop goes round again on err: its condition tests
// err, or an if in it tests err and continues, or leaves the loop when err is nil.
func retriesOn(info *types.Info, body *ast.BlockStmt, cond ast.Expr, err types.Object) bool {
	if usesObj(info, cond, err) {
		return true
	}
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if found {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit, *ast.ForStmt, *ast.RangeStmt:
			return false
		case *ast.IfStmt:
			if !usesObj(info, n.Cond, err) {
				return true
			}
			if has(n.Body, token.CONTINUE) {
				found = true
			} else if testsNil(info, n.Cond, err, token.EQL) && (has(n.Body, token.BREAK) || has(n.Body, token.RETURN)) {
				found = true
			} else if testsNil(info, n.Cond, err, token.NEQ) && n.Else != nil && (has(n.Else, token.BREAK) || has(n.Else, token.RETURN)) {
				found = true
			}
		}
		return true
	})
	return found
}

// testsNil reports whether cond holds err op nil (alone or in && / ||).
func testsNil(info *types.Info, cond ast.Expr, err types.Object, op token.Token) bool {
	found := false
	ast.Inspect(cond, func(n ast.Node) bool {
		b, ok := n.(*ast.BinaryExpr)
		if !ok || b.Op != op {
			return true
		}
		x, y := ast.Unparen(b.X), ast.Unparen(b.Y)
		if id, ok := y.(*ast.Ident); ok && id.Name == "nil" {
			if xid, ok := x.(*ast.Ident); ok && info.Uses[xid] == err {
				found = true
			}
		}
		return true
	})
	return found
}

// has reports whether n holds a branch (break, continue) or a return that acts on
// the loop around n: one not inside a nested loop, switch, select or literal.
func has(n ast.Node, tok token.Token) bool {
	found := false
	ast.Inspect(n, func(x ast.Node) bool {
		if found {
			return false
		}
		switch x := x.(type) {
		case *ast.FuncLit, *ast.ForStmt, *ast.RangeStmt:
			return false
		case *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
			return tok != token.BREAK
		case *ast.BranchStmt:
			found = x.Tok == tok
		case *ast.ReturnStmt:
			found = tok == token.RETURN
		}
		return true
	})
	return found
}

// markPairs calls mark for each name and the value assigned to it: pairwise, or the
// first name with a single value (a, err := f()).
func markPairs[L ast.Expr](lhs []L, rhs []ast.Expr, mark func(ast.Expr, ast.Expr)) {
	switch {
	case len(lhs) == len(rhs):
		for i := range lhs {
			mark(lhs[i], rhs[i])
		}
	case len(rhs) == 1 && len(lhs) > 0:
		mark(lhs[0], rhs[0])
	}
}
