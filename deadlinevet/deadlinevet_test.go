package deadlinevet_test

import (
	"testing"

	"github.com/deadlinekit/deadlinekit/deadlinevet"
	"golang.org/x/tools/go/analysis/analysistest"
)

func TestNewRoot(t *testing.T) {
	allOn(t)
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), deadlinevet.Analyzer, "newroot")
}

func TestNewRootInGoroutine(t *testing.T) {
	allOn(t)
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), deadlinevet.Analyzer, "newrootgo")
}

func TestDetached(t *testing.T) {
	allOn(t)
	analysistest.Run(t, analysistest.TestData(), deadlinevet.Analyzer, "detached")
}

func TestNoCtx(t *testing.T) {
	allOn(t)
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), deadlinevet.Analyzer, "noctx")
}

func TestSleep(t *testing.T) {
	allOn(t)
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), deadlinevet.Analyzer, "sleep")
}

func TestDirective(t *testing.T) {
	allOn(t)
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), deadlinevet.Analyzer, "directive")
}

// TestFlags turns checks off as a user would (-newroot=false -sleep=false): a new
// root that reaches the wire is still detached's finding.
func TestFlags(t *testing.T) {
	allOn(t)
	set(t, "newroot", "false")
	set(t, "sleep", "false")
	analysistest.Run(t, analysistest.TestData(), deadlinevet.Analyzer, "flagsoff")
}

func set(t *testing.T, name, value string) {
	t.Helper()
	f := deadlinevet.Analyzer.Flags.Lookup(name)
	if f == nil {
		t.Fatalf("no flag -%s", name)
	}
	old := f.Value.String()
	if err := f.Value.Set(value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Value.Set(old) })
}

func TestRetryLoop(t *testing.T) {
	allOn(t)
	analysistest.Run(t, analysistest.TestData(), deadlinevet.Analyzer, "retryloop")
}

// allOn turns every check on, whatever its default, for the test's length.
func allOn(t *testing.T) {
	for _, c := range []string{"newroot", "detached", "noctx", "retryloop", "sleep"} {
		set(t, c, "true")
	}
}

// TestDefaults pins the defaults EVALUATION.md decided (a check whose false
// positives exceeded 10% of its findings on public code is off).
func TestDefaults(t *testing.T) {
	for name, want := range map[string]string{
		"newroot": "false", "detached": "true", "noctx": "true", "retryloop": "true", "sleep": "false",
	} {
		f := deadlinevet.Analyzer.Flags.Lookup(name)
		if f == nil || f.DefValue != want || f.Value.String() != want {
			t.Errorf("-%s: default %v, want %s", name, f, want)
		}
	}
}
