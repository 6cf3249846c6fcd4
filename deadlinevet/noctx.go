package deadlinevet

import (
	"go/ast"

	"golang.org/x/tools/go/analysis"
)

// noCtxRenames: a call that sends or prepares an outbound request without a
// context, and the method or function that takes one first (the fix inserts the
// context at hand as its first argument). An empty value: no mechanical fix.
var noCtxHTTPFuncs = map[string]string{
	"Get": "", "Head": "", "Post": "", "PostForm": "",
	"NewRequest": "NewRequestWithContext",
}

var noCtxHTTPClient = []string{"Get", "Head", "Post", "PostForm"}

var noCtxSQL = map[string]map[string]string{
	"DB": {"Query": "QueryContext", "QueryRow": "QueryRowContext", "Exec": "ExecContext",
		"Prepare": "PrepareContext", "Ping": "PingContext"},
	"Tx": {"Query": "QueryContext", "QueryRow": "QueryRowContext", "Exec": "ExecContext",
		"Prepare": "PrepareContext", "Stmt": "StmtContext"},
	"Stmt": {"Query": "QueryContext", "QueryRow": "QueryRowContext", "Exec": "ExecContext"},
}

func (c *checker) noCtx(call *ast.CallExpr, s *scope) {
	info := c.pass.TypesInfo
	var what, rename string
	switch {
	case isFunc(info, call, "net/http", "Get", "Head", "Post", "PostForm", "NewRequest"):
		f := callee(info, call).Name()
		what, rename = "http."+f, noCtxHTTPFuncs[f]
	case isMethod(info, call, "net/http", "Client", noCtxHTTPClient...):
		what = "(*http.Client)." + callee(info, call).Name()
	case isFunc(info, call, "net", "Dial"):
		what = "net.Dial"
	case isMethod(info, call, "net", "Dialer", "Dial"):
		what, rename = "(*net.Dialer).Dial", "DialContext"
	default:
		f := callee(info, call)
		if f == nil {
			return
		}
		for typ, m := range noCtxSQL {
			if isMethod(info, call, "database/sql", typ, f.Name()) {
				if r, ok := m[f.Name()]; ok {
					what, rename = "(*sql."+typ+")."+f.Name(), r
				} else if typ == "DB" && f.Name() == "Begin" {
					what = "(*sql.DB).Begin"
				}
			}
		}
		if what == "" {
			return
		}
	}
	if c.dirs.accepts(call.Pos()) || (what == "http.NewRequest" && !c.sentHere(call, s)) {
		return
	}
	d := analysis.Diagnostic{
		Pos:      call.Pos(),
		End:      call.End(),
		Category: CheckNoCtx,
		Message:  what + " sends no context where " + s.ctx + " is at hand: the call outlives its caller's deadline",
	}
	if rename == "" {
		d.Message += "; build the request with http.NewRequestWithContext(" + s.ctx + ", ...) and send it with Do"
		switch what {
		case "net.Dial":
			d.Message = what + " sends no context where " + s.ctx + " is at hand: the call outlives its caller's deadline; use (&net.Dialer{}).DialContext(" + s.ctx + ", ...)"
		case "(*sql.DB).Begin":
			d.Message = what + " sends no context where " + s.ctx + " is at hand: the call outlives its caller's deadline; use BeginTx(" + s.ctx + ", nil)"
		}
	} else {
		d.Message += "; use " + rename + "(" + s.ctx + ", ...)"
		if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
			if ctx := c.ctxAt(s, call.Pos()); ctx != "" {
				sep := ", "
				if len(call.Args) == 0 {
					sep = ""
				}
				d.SuggestedFixes = []analysis.SuggestedFix{{
					Message: "Pass the context at hand",
					TextEdits: []analysis.TextEdit{
						{Pos: sel.Sel.Pos(), End: sel.Sel.End(), NewText: []byte(rename)},
						{Pos: call.Lparen + 1, End: call.Lparen + 1, NewText: []byte(ctx + sep)},
					},
				}}
			}
		}
	}
	c.pass.Report(d)
}

// sentHere reports `req, err := http.NewRequest(...)` whose request this same
// function sends as it is: (*http.Client).Do(req) or RoundTrip(req). A request
// returned, handed to another function, or given a context later
// (req.WithContext(ctx), as go-kit's and kratos's transports do) may well travel
// with one: only what is seen sent without a context is reported.
func (c *checker) sentHere(call *ast.CallExpr, s *scope) bool {
	k := len(c.stack)
	if k < 2 {
		return false
	}
	a, ok := c.stack[k-2].(*ast.AssignStmt)
	if !ok || len(a.Rhs) != 1 || ast.Unparen(a.Rhs[0]) != call {
		return false
	}
	id, ok := a.Lhs[0].(*ast.Ident)
	if !ok {
		return false
	}
	req := c.pass.TypesInfo.ObjectOf(id)
	var body *ast.BlockStmt
	switch fn := s.fn.(type) {
	case *ast.FuncDecl:
		body = fn.Body
	case *ast.FuncLit:
		body = fn.Body
	}
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if found {
			return false
		}
		m, ok := n.(*ast.CallExpr)
		if !ok || len(m.Args) != 1 {
			return true
		}
		f := callee(c.pass.TypesInfo, m)
		if f == nil || (f.Name() != "Do" && f.Name() != "RoundTrip") {
			return true
		}
		if x, ok := ast.Unparen(m.Args[0]).(*ast.Ident); ok && c.pass.TypesInfo.Uses[x] == req {
			found = true
		}
		return true
	})
	return found
}
