// Command deadlinevet runs the [deadlinevet.Analyzer] alone or under go vet:
//
//	deadlinevet ./...
//	go vet -vettool=$(command -v deadlinevet) ./...
//
// Each check has a flag of its name: deadlinevet -sleep=false ./... turns one off.
package main

import (
	"github.com/deadlinekit/deadlinekit/deadlinevet"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(deadlinevet.Analyzer) }
