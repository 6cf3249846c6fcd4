package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks checks that every relative link of README.md and docs/*.md names a
// file of the repository, and every #anchor a heading of its page.
func TestDocsLinks(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	for _, f := range files {
		md, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(md), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			page := f
			if path != "" {
				page = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(page); err != nil {
					t.Errorf("%s: link %s: %v", f, target, err)
					continue
				}
			}
			if anchor != "" && !hasAnchor(t, page, anchor) {
				t.Errorf("%s: link %s: no heading %q in %s", f, target, anchor, page)
			}
		}
	}
}

// TestAnchor: the anchors of headings, as the repository's host makes them.
func TestAnchor(t *testing.T) {
	for h, want := range map[string]string{
		"What it costs": "what-it-costs",
		"Redis: bounds, probes and what an outage costs": "redis-bounds-probes-and-what-an-outage-costs",
		"The `lost` answer, on Redis":                    "the-lost-answer-on-redis",
	} {
		if got := anchor(h); got != want {
			t.Errorf("anchor(%q) = %q, want %q", h, got, want)
		}
	}
}

// hasAnchor reports whether the Markdown file page has a heading whose anchor is a.
func hasAnchor(t *testing.T, page, a string) bool {
	md, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(md), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") && anchor(h) == a {
			return true
		}
	}
	return false
}

// anchor returns a heading's anchor: lower case, punctuation dropped, spaces as dashes.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
