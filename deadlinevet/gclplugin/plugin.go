// Package gclplugin registers deadlinevet as a golangci-lint module plugin.
//
// Name it in .custom-gcl.yml, build the custom binary with golangci-lint custom,
// and enable it in .golangci.yml; its settings map a check's name to whether it
// runs, as the command's flags do (a check left out keeps its default):
//
//	# .custom-gcl.yml
//	version: v2.8.0
//	plugins:
//	  - module: github.com/deadlinekit/deadlinekit/deadlinevet
//	    import: github.com/deadlinekit/deadlinekit/deadlinevet/gclplugin
//	    version: vX.Y.Z # the version of this module you use
//	    # or, from a checkout: path: ./path/to/deadlinekit/deadlinevet
//
//	# .golangci.yml
//	version: "2"
//	linters:
//	  enable:
//	    - deadlinevet
//	  settings:
//	    custom:
//	      deadlinevet:
//	        type: module
//	        description: finds lost deadlines
//	        settings:
//	          newroot: true
package gclplugin

import (
	"fmt"
	"strconv"

	"github.com/deadlinekit/deadlinekit/deadlinevet"
	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"
)

func init() { register.Plugin("deadlinevet", New) }

type plugin struct{}

// New reads the plugin's settings (check name → on) into the analyzer's flags.
func New(settings any) (register.LinterPlugin, error) {
	checks, err := register.DecodeSettings[map[string]bool](settings)
	if err != nil {
		return nil, fmt.Errorf("deadlinevet settings: %w", err)
	}
	for name, on := range checks {
		f := deadlinevet.Analyzer.Flags.Lookup(name)
		if f == nil {
			return nil, fmt.Errorf("deadlinevet settings: no check %q (the checks: newroot, detached, noctx, retryloop, sleep)", name)
		}
		if err := f.Value.Set(strconv.FormatBool(on)); err != nil {
			return nil, err
		}
	}
	return plugin{}, nil
}

func (plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) {
	return []*analysis.Analyzer{deadlinevet.Analyzer}, nil
}

// GetLoadMode asks for type information: every check needs it.
func (plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
