package deadlinevet

import (
	"errors"
	"fmt"
	"go/ast"
	"go/token"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/tools/go/analysis"
)

// directivePrefix starts the one directive deadlinevet knows. Like //go: and
// //nolint, it has no space after the slashes.
const directivePrefix = "deadlinevet:"

// parseDirective reads one comment's text, as go/ast gives it (with its // or
// /* */). ok is false for a comment that is no deadlinevet directive at all; err
// says what is wrong with one that is.
func parseDirective(text string) (reason string, ok bool, err error) {
	var body string
	switch {
	case strings.HasPrefix(text, "//"):
		body = text[2:]
	case strings.HasPrefix(text, "/*"):
		body = strings.TrimSuffix(text[2:], "*/")
		if strings.HasPrefix(strings.TrimLeft(body, " \t"), directivePrefix) {
			return "", true, errors.New("a //deadlinevet: directive is a line comment, not /* */")
		}
		return "", false, nil
	default:
		return "", false, nil
	}
	trimmed := strings.TrimLeft(body, " \t")
	if !strings.HasPrefix(trimmed, directivePrefix) {
		return "", false, nil
	}
	if trimmed != body {
		return "", true, errors.New("write //deadlinevet: with no space after the slashes, as //go: directives are")
	}
	rest := body[len(directivePrefix):]
	verb, reason, _ := strings.Cut(rest, " ")
	if i := strings.IndexAny(verb, "\t"); i >= 0 {
		verb, reason = verb[:i], verb[i+1:]+" "+reason
	}
	if verb != "detached" {
		return "", true, fmt.Errorf("unknown directive //deadlinevet:%s: the one directive is //deadlinevet:detached <reason>", clip(verb))
	}
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return "", true, errors.New("//deadlinevet:detached needs a reason: say why this work may outlive its caller")
	}
	if !utf8.ValidString(reason) {
		return "", true, errors.New("//deadlinevet:detached: the reason is not valid UTF-8")
	}
	for _, r := range reason {
		if !unicode.IsPrint(r) && r != '\t' {
			return "", true, fmt.Errorf("//deadlinevet:detached: the reason holds the unprintable %U", r)
		}
	}
	return reason, true, nil
}

// clip shortens what a message quotes from the user's source.
func clip(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// directives are the extents of source a file's //deadlinevet:detached
// comments accept.
type directives struct {
	spans []span
}

type span struct{ pos, end token.Pos }

// accepts reports whether a directive covers pos.
func (d *directives) accepts(pos token.Pos) bool {
	for _, s := range d.spans {
		if s.pos <= pos && pos < s.end {
			return true
		}
	}
	return false
}

// parseFileDirectives finds f's directives and reports the malformed ones. A
// directive at the end of a line covers that line and the statement that starts
// on it; one on a line of its own covers the next line, and its statement (so a
// directive above a go statement covers the whole goroutine).
func parseFileDirectives(pass *analysis.Pass, f *ast.File) *directives {
	d := &directives{}
	tf := pass.Fset.File(f.Pos())
	if tf == nil {
		return d
	}
	src, _ := readFile(pass, tf.Name())
	for _, g := range f.Comments {
		for _, cm := range g.List {
			_, ok, err := parseDirective(cm.Text)
			if !ok {
				continue
			}
			if err != nil {
				pass.Report(analysis.Diagnostic{Pos: cm.Pos(), End: cm.End(), Category: CategoryDirective, Message: err.Error()})
				continue
			}
			line := tf.Line(cm.Pos())
			if ownLine(tf, src, cm.Pos()) {
				line = tf.Line(g.End()) + 1
			}
			if line > tf.LineCount() {
				continue
			}
			start := tf.LineStart(line)
			end := token.Pos(tf.Base() + tf.Size())
			if line < tf.LineCount() {
				end = tf.LineStart(line + 1)
			}
			d.spans = append(d.spans, span{start, end})
			if st := outermostStmtOn(f, tf, line); st != nil {
				d.spans = append(d.spans, span{st.Pos(), st.End()})
			}
		}
	}
	return d
}

// ownLine reports whether nothing but space precedes pos on its line.
func ownLine(tf *token.File, src []byte, pos token.Pos) bool {
	if src == nil || tf.Offset(pos) > len(src) {
		return false
	}
	start := tf.Offset(tf.LineStart(tf.Line(pos)))
	return strings.TrimLeft(string(src[start:tf.Offset(pos)]), " \t") == ""
}

func outermostStmtOn(f *ast.File, tf *token.File, line int) ast.Stmt {
	var found ast.Stmt
	ast.Inspect(f, func(n ast.Node) bool {
		if found != nil || n == nil {
			return false
		}
		if tf.Line(n.Pos()) > line || tf.Line(n.End()) < line {
			return false
		}
		if st, ok := n.(ast.Stmt); ok && tf.Line(st.Pos()) == line {
			if _, block := st.(*ast.BlockStmt); !block {
				found = st
				return false
			}
		}
		return true
	})
	return found
}
