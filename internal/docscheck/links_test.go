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
		for _, bad := range brokenLinks(t, f) {
			t.Error(bad)
		}
	}
}

// TestBrokenLinkFails shows that a link to a missing file or heading is reported,
// and a good one is not.
func TestBrokenLinkFails(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "page.md")
	md := "# A page\n\n## What it costs\n\n[ok](page.md) [ok](#what-it-costs) [ok](page.md#a-page) " +
		"[web](https://example.org/x) [missing](nothing.md) [no heading](#what-it-cost)\n"
	if err := os.WriteFile(page, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := brokenLinks(t, page)
	if len(bad) != 2 || !strings.Contains(bad[0], "nothing.md") || !strings.Contains(bad[1], "#what-it-cost") {
		t.Fatalf("reported %q, want the two broken links", bad)
	}
}

// brokenLinks returns the relative links of the Markdown file f whose file or
// heading does not exist.
func brokenLinks(t *testing.T, f string) []string {
	md, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
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
				bad = append(bad, f+": link "+target+": "+err.Error())
				continue
			}
		}
		if anchor != "" && !hasAnchor(t, page, anchor) {
			bad = append(bad, f+": link "+target+": no such heading in "+page)
		}
	}
	return bad
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
