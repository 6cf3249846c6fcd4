package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const handler = `package svc

import (
	"context"
	"net/http"
)

func Handle(w http.ResponseWriter, r *http.Request) {
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://b/", nil)
	_, _ = http.DefaultClient.Do(req)
}
`

// TestCommand runs the built command as a user does, alone and under go vet, on a
// module with one lost deadline, and with the check turned off.
func TestCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "deadlinevet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mod := filepath.Join(dir, "svc")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"go.mod": "module example.com/svc\n\ngo 1.26\n", "svc.go": handler} {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// newroot is off by default: the new root is detached's finding where it
	// reaches the wire, and newroot's when asked for.
	const detached = "svc.go:9:12: http.NewRequestWithContext is sent a context cut from its caller by context.Background()"
	const newroot = "svc.go:9:39: context.Background() where r.Context() is at hand"
	for _, tc := range []struct {
		name string
		args []string
		want string // "" = no findings, exit 0
	}{
		{"alone", []string{bin, "./..."}, detached},
		{"go vet", []string{"go", "vet", "-vettool=" + bin, "./..."}, detached},
		{"alone, newroot on", []string{bin, "-newroot", "./..."}, newroot},
		{"go vet, newroot on", []string{"go", "vet", "-vettool=" + bin, "-newroot", "./..."}, newroot},
		{"alone, check off", []string{bin, "-detached=false", "./..."}, ""},
		{"go vet, check off", []string{"go", "vet", "-vettool=" + bin, "-detached=false", "./..."}, ""},
	} {
		cmd := exec.Command(tc.args[0], tc.args[1:]...)
		cmd.Dir = mod
		out, err := cmd.CombinedOutput()
		switch {
		case tc.want == "" && (err != nil || len(out) > 0):
			t.Errorf("%s: %v\n%s", tc.name, err, out)
		case tc.want != "" && (err == nil || !strings.Contains(string(out), tc.want)):
			t.Errorf("%s: err %v, output lacks %q:\n%s", tc.name, err, tc.want, out)
		}
	}
}
