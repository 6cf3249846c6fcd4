package deadlinevet

import (
	"go/ast"
	"go/types"
	"os"

	"golang.org/x/tools/go/analysis"

	"golang.org/x/tools/go/types/typeutil"
)

// readFile reads a source file of the package: through the driver where it
// offers a way (gopls has unsaved buffers), from disk where it does not.
func readFile(pass *analysis.Pass, name string) ([]byte, error) {
	if pass.ReadFile != nil {
		return pass.ReadFile(name)
	}
	return os.ReadFile(name)
}

const (
	pkgGRPC    = "google.golang.org/grpc"
	pkgConnect = "connectrpc.com/connect"
	pkgKit     = "github.com/deadlinekit/deadlinekit"
	pkgRetry   = pkgKit + "/retry"
	pkgConnKit = pkgKit + "/connectkit"
)

// isNamed reports whether t (or *t, when ptr) is the named type path.name.
func isNamed(t types.Type, ptr bool, path, name string) bool {
	if t == nil {
		return false
	}
	if ptr {
		p, ok := types.Unalias(t).(*types.Pointer)
		if !ok {
			return false
		}
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	o := n.Obj()
	return o.Name() == name && o.Pkg() != nil && o.Pkg().Path() == path
}

func isContext(t types.Type) bool     { return isNamed(t, false, "context", "Context") }
func isHTTPRequest(t types.Type) bool { return isNamed(t, true, "net/http", "Request") }

// isServerStream reports a gRPC server stream: grpc.ServerStream itself, or a
// generated stream type that embeds it (anything with Context, SendMsg and
// RecvMsg whose Context returns a context.Context).
func isServerStream(t types.Type) bool {
	if t == nil {
		return false
	}
	ms := types.NewMethodSet(t)
	need := 0
	for i := range ms.Len() {
		switch f := ms.At(i).Obj(); f.Name() {
		case "SendMsg", "RecvMsg", "SetHeader", "SendHeader":
			need++
		case "Context":
			if sig, ok := f.Type().(*types.Signature); ok && sig.Results().Len() == 1 && isContext(sig.Results().At(0).Type()) {
				need++
			}
		}
	}
	return need == 5
}

// callee is the function or method call calls, or nil.
func callee(info *types.Info, call *ast.CallExpr) *types.Func {
	f, _ := typeutil.Callee(info, call).(*types.Func)
	return f
}

// isFunc reports a call of the package-level function path.name (one of names).
func isFunc(info *types.Info, call *ast.CallExpr, path string, names ...string) bool {
	f := callee(info, call)
	if f == nil || f.Pkg() == nil || f.Pkg().Path() != path {
		return false
	}
	if sig := f.Type().(*types.Signature); sig.Recv() != nil {
		return false
	}
	for _, n := range names {
		if f.Name() == n {
			return true
		}
	}
	return false
}

// isMethod reports a call of a method of path.typ (or *path.typ) named one of names.
func isMethod(info *types.Info, call *ast.CallExpr, path, typ string, names ...string) bool {
	f := callee(info, call)
	if f == nil {
		return false
	}
	recv := f.Type().(*types.Signature).Recv()
	if recv == nil {
		return false
	}
	t := recv.Type()
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != path || n.Obj().Name() != typ {
		return false
	}
	for _, name := range names {
		if f.Name() == name {
			return true
		}
	}
	return false
}

func isNewRoot(info *types.Info, call *ast.CallExpr) bool {
	return isFunc(info, call, "context", "Background", "TODO")
}

// calleeName is "context.Background" for a call of context.Background, written
// with the file's name for the package.
func calleeName(info *types.Info, call *ast.CallExpr) string {
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.SelectorExpr, *ast.Ident:
		return types.ExprString(fun)
	}
	if f := callee(info, call); f != nil {
		return f.Name()
	}
	return "call"
}

// usesObj reports whether n mentions obj (outside function literals, which are
// scopes of their own).
func usesObj(info *types.Info, n ast.Node, obj types.Object) bool {
	if obj == nil || n == nil {
		return false
	}
	found := false
	ast.Inspect(n, func(x ast.Node) bool {
		if found {
			return false
		}
		if id, ok := x.(*ast.Ident); ok && info.Uses[id] == obj {
			found = true
		}
		return true
	})
	return found
}
