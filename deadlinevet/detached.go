package deadlinevet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
)

// origin is where a context was cut from its caller.
type origin struct {
	pos      token.Pos
	how      string // "context.WithoutCancel", "context.Background()"
	reported bool   // the newroot check reported this root already
}

// flows tracks, in source order, which variables hold a context cut from its
// caller. It is deliberately simple: one function at a time, last assignment wins.
type flows struct {
	cut map[types.Object]*origin
}

func newFlows() *flows { return &flows{cut: make(map[types.Object]*origin)} }

// originOf is where the context e evaluates to was cut from its caller, or nil
// when it was not (or when it was given a deadline of its own since).
func (fl *flows) originOf(c *checker, e ast.Expr, s *scope) *origin {
	info := c.pass.TypesInfo
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return fl.cut[info.Uses[e]]
	case *ast.CallExpr:
		switch {
		case isNewRoot(info, e):
			return &origin{pos: e.Pos(), how: calleeName(info, e) + "()", reported: c.newRootReported(e, s)}
		case isFunc(info, e, "context", "WithoutCancel"):
			return &origin{pos: e.Pos(), how: calleeName(info, e)}
		case isFunc(info, e, "context", "WithTimeout", "WithDeadline", "WithTimeoutCause", "WithDeadlineCause"):
			return nil // it has a deadline again, if not the caller's
		}
		// Anything else that takes a context first and returns one derives from
		// it: context.WithValue, WithCancel, metadata.AppendToOutgoingContext,
		// trace.ContextWithSpan, ...
		f := callee(info, e)
		if f == nil || len(e.Args) == 0 {
			return nil
		}
		sig := f.Type().(*types.Signature)
		if sig.Params().Len() == 0 || !isContext(sig.Params().At(0).Type()) ||
			sig.Results().Len() == 0 || !isContext(sig.Results().At(0).Type()) {
			return nil
		}
		return fl.originOf(c, e.Args[0], s)
	}
	return nil
}

func (fl *flows) set(c *checker, lhs ast.Expr, o *origin) {
	id, ok := ast.Unparen(lhs).(*ast.Ident)
	if !ok || id.Name == "_" {
		return
	}
	obj := c.pass.TypesInfo.ObjectOf(id)
	if obj == nil {
		return
	}
	if o == nil {
		delete(fl.cut, obj)
	} else {
		fl.cut[obj] = o
	}
}

func (fl *flows) assign(c *checker, a *ast.AssignStmt, s *scope) {
	if a.Tok != token.ASSIGN && a.Tok != token.DEFINE {
		return
	}
	switch {
	case len(a.Lhs) == len(a.Rhs):
		for i := range a.Lhs {
			fl.set(c, a.Lhs[i], fl.originOf(c, a.Rhs[i], s))
		}
	case len(a.Rhs) == 1: // ctx, cancel := context.WithCancel(parent)
		fl.set(c, a.Lhs[0], fl.originOf(c, a.Rhs[0], s))
	}
}

func (fl *flows) valueSpec(c *checker, v *ast.ValueSpec, s *scope) {
	switch {
	case len(v.Names) == len(v.Values):
		for i := range v.Names {
			fl.set(c, v.Names[i], fl.originOf(c, v.Values[i], s))
		}
	case len(v.Values) == 1:
		fl.set(c, v.Names[0], fl.originOf(c, v.Values[0], s))
	}
}

// sinkCtx is the context argument of an outbound call, and a name for the call,
// or nil when call sends nothing downstream.
func sinkCtx(info *types.Info, call *ast.CallExpr) (ast.Expr, string) {
	if len(call.Args) == 0 {
		return nil, ""
	}
	switch {
	case isFunc(info, call, "net/http", "NewRequestWithContext"):
		return call.Args[0], "http.NewRequestWithContext"
	case isMethod(info, call, "net/http", "Request", "WithContext", "Clone"):
		return call.Args[0], "(*http.Request)." + callee(info, call).Name()
	}
	f := callee(info, call)
	if f == nil {
		return nil, ""
	}
	sig := f.Type().(*types.Signature)
	if sig.Recv() == nil || sig.Params().Len() == 0 || !isContext(sig.Params().At(0).Type()) {
		return nil, ""
	}
	name := f.Name()
	if n := recvName(sig); n != "" {
		name = n + "." + name
	}
	// grpc.ClientConnInterface.Invoke / NewStream, and generated gRPC client
	// methods: a method whose last parameter is ...grpc.CallOption.
	if sig.Variadic() {
		last := sig.Params().At(sig.Params().Len() - 1).Type().(*types.Slice).Elem()
		if isNamed(last, false, pkgGRPC, "CallOption") {
			return call.Args[0], name
		}
	}
	// connect: (*connect.Client[Req, Res]).CallUnary and friends, and generated
	// connect clients, whose methods take or return connect's request, response
	// and stream types.
	if isMethod(info, call, pkgConnect, "Client") {
		return call.Args[0], name
	}
	for _, tup := range []*types.Tuple{sig.Params(), sig.Results()} {
		for v := range tup.Variables() {
			if fromPkg(v.Type(), pkgConnect) {
				return call.Args[0], name
			}
		}
	}
	return nil, ""
}

// fromPkg reports whether t (or what t points to) is a named type of package path.
func fromPkg(t types.Type, path string) bool {
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == path
}

func recvName(sig *types.Signature) string {
	t := sig.Recv().Type()
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}

func (c *checker) detached(call *ast.CallExpr, s *scope) {
	arg, name := sinkCtx(c.pass.TypesInfo, call)
	if arg == nil {
		return
	}
	o := c.flows.originOf(c, arg, s)
	if o == nil || o.reported || c.dirs.accepts(call.Pos()) || c.dirs.accepts(o.pos) {
		return
	}
	line := c.pass.Fset.Position(o.pos).Line
	where := fmt.Sprintf("%s (line %d)", o.how, line)
	if c.pass.Fset.Position(call.Pos()).Line == line {
		where = o.how
	}
	c.pass.Report(analysis.Diagnostic{
		Pos:      call.Pos(),
		End:      call.End(),
		Category: CheckDetached,
		Message: fmt.Sprintf("%s is sent a context cut from its caller by %s, where %s is at hand: "+
			"the downstream works with no deadline; give it one, or accept it with //deadlinevet:detached <reason>",
			name, where, s.ctx),
	})
}
