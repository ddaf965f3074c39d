package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/shared/redisacl"
)

// userIDRe is ElastiCache's rule for a user id: a letter, then letters,
// digits and single hyphens, not ending in one; at most 40.
var userIDRe = regexp.MustCompile(`^[a-z]([a-z0-9]|-[a-z0-9])*$`)

// TestRedisUsers: in every stack the tests build (default, every option,
// complete ARNs, dev, dev with overrides, serverless) each function has an ElastiCache
// user whose access string is package redisacl's, whose password is its
// own secret, which only its role may read and which its REDIS_AUTH_SECRET_ID
// names, as its REDIS_URL names the user; the group holds them and a
// "default" user switched off; the replication group uses the group and
// no AUTH token.
func TestRedisUsers(t *testing.T) {
	f := stacks(t)
	pf := profileStacks(t)
	if !slicesEqual(functionNames, redisacl.Functions()) {
		t.Fatalf("functions %v, Redis users for %v", functionNames, redisacl.Functions())
	}
	for _, st := range []struct {
		name  string
		stack *HourglassStack
		tpl   map[string]any
	}{
		{"default", f.def, f.defMap}, {"options", f.opt, f.optMap}, {"complete ARNs", f.acct, f.acctMap},
		{"dev", pf.dev, pf.devMap}, {"dev override", pf.override, pf.overrideMap}, {"serverless", pf.sls, pf.slsMap},
	} {
		t.Run(st.name, func(t *testing.T) {
			users := resources(st.tpl, "AWS::ElastiCache::User")
			if len(users) != len(functionNames)+1 {
				t.Errorf("%d users, want one per function and the default", len(users))
			}
			ids := map[string]string{} // UserId -> logical id
			userID := func(logical string) string {
				id, _ := propsOf(users[logical])["UserId"].(string)
				if len(id) > 40 || !userIDRe.MatchString(id) {
					t.Errorf("%s: UserId %q is not a valid ElastiCache user id", logical, id)
				}
				if other, ok := ids[id]; ok {
					t.Errorf("%s and %s share UserId %q", logical, other, id)
				}
				ids[id] = logical
				return id
			}
			fns := resources(st.tpl, "AWS::Lambda::Function")
			var members []any
			for _, fn := range functionNames {
				logical := logicalID(st.stack, st.stack.RedisUsers[fn])
				members = append(members, ref(logical))
				p := propsOf(users[logical])
				userID(logical)
				access, err := redisacl.AccessString(fn, redisPrefix)
				if err != nil {
					t.Fatal(err)
				}
				secret := logicalID(st.stack, st.stack.RedisSecrets[fn])
				want := props{
					"Engine": "redis", "UserId": p["UserId"], "UserName": "hourglass-" + fn, "AccessString": access,
					"Passwords": []any{props{"Fn::Join": []any{"", []any{"{{resolve:secretsmanager:", ref(secret), ":SecretString:::}}"}}}},
				}
				got := props{}
				for k, v := range p {
					if k != "Tags" {
						got[k] = v
					}
				}
				if gj, wj := mustJSON(got), mustJSON(want); gj != wj {
					t.Errorf("%s's user:\n got %s\nwant %s", fn, gj, wj)
				}
				vars := propsOf(fns[logicalID(st.stack, st.stack.Functions[fn])])["Environment"].(map[string]any)["Variables"].(map[string]any)
				if got := mustJSON(vars["REDIS_AUTH_SECRET_ID"]); got != mustJSON(ref(secret)) {
					t.Errorf("%s: REDIS_AUTH_SECRET_ID %s, want its secret %s", fn, got, secret)
				}
				if url := render(st.tpl, vars["REDIS_URL"]); !strings.HasPrefix(url, "rediss://hourglass-"+fn+"@") {
					t.Errorf("%s: REDIS_URL %s names another user", fn, url)
				}
				if vars["HOURGLASS_REDIS_PREFIX"] != redisPrefix {
					t.Errorf("%s: HOURGLASS_REDIS_PREFIX %v, want the users' %q", fn, vars["HOURGLASS_REDIS_PREFIX"], redisPrefix)
				}
				// As AWS evaluates it: its role reads its own password,
				// every other role is refused it.
				arn := render(st.tpl, ref(secret))
				for _, other := range functionNames {
					role := logicalID(st.stack, st.stack.Functions[other].Role())
					got := permitted(t, st.tpl, caller{name: other, role: role}, "secretsmanager:GetSecretValue", arn, secret)
					if got != (other == fn) {
						t.Errorf("%s's role may read %s's Redis password: %v", other, fn, got)
					}
				}
			}
			def := logicalID(st.stack, st.stack.RedisDefaultUser)
			p := propsOf(users[def])
			if id := userID(def); id == "default" {
				t.Errorf("the default user's UserId is %q: ElastiCache's own default user has it", id)
			}
			if p["UserName"] != "default" || p["AccessString"] != "off -@all" ||
				p["NoPasswordRequired"] != true || p["Engine"] != "redis" {
				t.Errorf("default user %s, want default, off -@all", mustJSON(p))
			}
			members = append(members, ref(def))

			group := logicalID(st.stack, st.stack.RedisUserGroup)
			if n := len(resources(st.tpl, "AWS::ElastiCache::UserGroup")); n != 1 {
				t.Errorf("%d user groups", n)
			}
			gp := propsOf(resources(st.tpl, "AWS::ElastiCache::UserGroup")[group])
			if mustJSON(gp["UserIds"]) != mustJSON(members) || gp["Engine"] != "redis" {
				t.Errorf("user group %s, want engine redis and users %s", mustJSON(gp), mustJSON(members))
			}
			for _, rg := range resources(st.tpl, "AWS::ElastiCache::ReplicationGroup") {
				rp := propsOf(rg)
				if _, ok := rp["AuthToken"]; ok {
					t.Error("the replication group has an AUTH token beside its users")
				}
				if mustJSON(rp["UserGroupIds"]) != mustJSON([]any{ref(group)}) {
					t.Errorf("replication group's UserGroupIds %s, want the user group", mustJSON(rp["UserGroupIds"]))
				}
				if !strings.Contains(mustJSON(rg), group) {
					t.Error("the replication group does not depend on its user group")
				}
			}
			// ElastiCache Serverless takes one group (RBAC is its only
			// access control) and no AUTH token at all.
			for _, sc := range resources(st.tpl, "AWS::ElastiCache::ServerlessCache") {
				if got := mustJSON(propsOf(sc)["UserGroupId"]); got != mustJSON(ref(group)) {
					t.Errorf("serverless cache's UserGroupId %s, want the user group", got)
				}
			}
		})
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }
