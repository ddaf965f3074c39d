package main

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/shared/config"
)

// TestFunctionsReadEveryVariableTheStackSets: a variable the stack sets and
// no function reads is a setting that silently does nothing in AWS (a
// secret passed as PAYOUT_SIGNING_SECRET_ID while the functions read only
// ..._ARN, say). Every variable of every function, in each fixture stack,
// must be one config.Load reads.
func TestFunctionsReadEveryVariableTheStackSets(t *testing.T) {
	read := map[string]bool{}
	typ := reflect.TypeOf(config.Config{})
	for i := range typ.NumField() {
		if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("env"), ","); name != "" && name != "-" {
			read[name] = true
		}
	}
	if len(read) < 20 {
		t.Fatalf("found only %d variables in config.Config's env tags: is the tag still `env`?", len(read))
	}
	f, p := stacks(t), profileStacks(t)
	for _, st := range []struct {
		stack *HourglassStack
		tpl   map[string]any
	}{{f.def, f.defMap}, {f.opt, f.optMap}, {f.acct, f.acctMap}, {p.sls, p.slsMap}, {p.sls6, p.sls6Map}} {
		fns := resources(st.tpl, "AWS::Lambda::Function")
		for _, name := range functionNames {
			id := logicalID(st.stack, st.stack.Functions[name])
			env, _ := propsOf(fns[id])["Environment"].(map[string]any)
			vars, _ := env["Variables"].(map[string]any)
			var unread []string
			for name := range vars {
				if !read[name] {
					unread = append(unread, name)
				}
			}
			sort.Strings(unread)
			if len(vars) == 0 || len(unread) > 0 {
				t.Errorf("%s: %d variables, read by no function: %v", id, len(vars), unread)
			}
		}
	}
}
