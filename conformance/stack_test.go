package conformance

import (
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want Variant
	}{
		{"", "off"},
		{"off", "off"},
		{"default", "default"},
		{"nodefault", "nodefault"},
	} {
		t.Setenv(Env, tc.env)
		got, err := FromEnv()
		if err != nil || got != tc.want {
			t.Errorf("%s=%q: got %q, %v; want %q", Env, tc.env, got, err, tc.want)
		}
	}
}

func TestFromEnvHostile(t *testing.T) {
	for _, env := range []string{"Default", " default", "default ", "on", "1", "off,default", "\t", strings.Repeat("d", 1<<16)} {
		t.Setenv(Env, env)
		v, err := FromEnv()
		if err == nil || !strings.Contains(err.Error(), Env) {
			t.Errorf("%s=%.20q: got %q, %v; want an error naming %s", Env, env, v, err, Env)
		}
	}
}

func TestOptions(t *testing.T) {
	if n := len(Variant("off").HandlerOptions()) + len(Variant("off").ClientOptions()); n != 0 {
		t.Errorf("off adds %d options, want none", n)
	}
	for _, v := range []Variant{"default", "nodefault"} {
		if len(v.HandlerOptions()) != 1 || len(v.ClientOptions()) != 1 {
			t.Errorf("%s: want one handler and one client option", v)
		}
	}
}
