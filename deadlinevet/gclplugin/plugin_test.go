package gclplugin

import (
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/deadlinevet"
	"github.com/golangci/plugin-module-register/register"
)

func TestPlugin(t *testing.T) {
	newPlugin, err := register.GetPlugin("deadlinevet")
	if err != nil {
		t.Fatal(err)
	}
	old := deadlinevet.Analyzer.Flags.Lookup("sleep").Value.String()
	t.Cleanup(func() { deadlinevet.Analyzer.Flags.Set("sleep", old) })
	p, err := newPlugin(map[string]any{"sleep": true})
	if err != nil {
		t.Fatal(err)
	}
	if got := deadlinevet.Analyzer.Flags.Lookup("sleep").Value.String(); got != "true" {
		t.Errorf("sleep = %s after settings sleep: true", got)
	}
	as, err := p.BuildAnalyzers()
	if err != nil || len(as) != 1 || as[0] != deadlinevet.Analyzer {
		t.Errorf("BuildAnalyzers = %v, %v", as, err)
	}
	if p.GetLoadMode() != register.LoadModeTypesInfo {
		t.Errorf("load mode %q", p.GetLoadMode())
	}
	for _, bad := range []any{map[string]any{"newrot": false}, map[string]any{"sleep": "no"}, []int{1}} {
		if _, err := newPlugin(bad); err == nil || !strings.Contains(err.Error(), "deadlinevet settings") {
			t.Errorf("settings %v: err %v, want one naming deadlinevet settings", bad, err)
		}
	}
}
