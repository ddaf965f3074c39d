// Package cfnguard runs AWS CloudFormation Guard (cfn-guard) with the AWS
// Control Tower proactive rules over a synthesized template: the binary and
// the rules that the npm package @cdklabs/cdk-validator-cfnguard ships
// (package.json; `npm ci` installs it into node_modules/).
//
// cfn-guard itself does not read suppressions, so this package applies the
// convention of the Guard rules registry: a resource accepts a rule with
// Metadata {"guard": {"SuppressedRules": ["<rule name>"]}}, and Hourglass
// adds the reason under "SuppressionReasons" {"<rule name>": "..."}. A
// suppression without a reason is an error.
package cfnguard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

// Package is where npm installs the validator, under a node_modules root.
const Package = "node_modules/@cdklabs/cdk-validator-cfnguard"

// Guard is a cfn-guard binary and a directory of .guard rule files.
type Guard struct {
	Binary string
	Rules  string
}

// Finding is one rule that one resource breaks.
type Finding struct {
	// Rule is cfn-guard's rule name (sqs_dlq_check): what SuppressedRules
	// names. Control is the Control Tower control (CT.SQS.PR.1).
	Rule, Control string
	// Resource is the logical id, Type its resource type.
	Resource, Type string
	// Description and Fix are the rule's own words.
	Description, Fix string
	// Reason is why it is accepted, for a suppressed finding.
	Reason string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s (%s) on %s %s: %s; fix: %s", f.Rule, f.Control, f.Type, f.Resource, f.Description, f.Fix)
}

// Result is one template's evaluation.
type Result struct {
	// RuleFiles is how many .guard files ran.
	RuleFiles int
	// Findings are not suppressed; Suppressed are, with their reasons.
	Findings, Suppressed []Finding
}

// FromNodeModules finds the binary for this machine and the Control Tower
// rules under root/node_modules.
func FromNodeModules(root string) (Guard, error) {
	osName := map[string]string{"linux": "ubuntu", "darwin": "macos"}[runtime.GOOS]
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	if osName == "" || arch == "" {
		return Guard{}, fmt.Errorf("cfnguard: no cfn-guard binary for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	dir := filepath.Join(root, Package)
	g := Guard{
		Binary: filepath.Join(dir, "bin", osName, arch, "cfn-guard"),
		Rules:  filepath.Join(dir, "rules", "control-tower", "cfn-guard"),
	}
	for _, p := range []string{g.Binary, g.Rules} {
		if _, err := os.Stat(p); err != nil {
			return Guard{}, fmt.Errorf("cfnguard: %s is missing: run npm ci at the repository root (make test and make synth do): %w", p, err)
		}
	}
	return g, nil
}

// Validate evaluates the template at path against every rule.
func (g Guard) Validate(ctx context.Context, path string) (Result, error) {
	var res Result
	err := filepath.WalkDir(g.Rules, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".guard") {
			res.RuleFiles++
		}
		return err
	})
	if err != nil {
		return res, fmt.Errorf("cfnguard: rules: %w", err)
	}
	if res.RuleFiles == 0 {
		return res, fmt.Errorf("cfnguard: no .guard files under %s", g.Rules)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return res, fmt.Errorf("cfnguard: %w", err)
	}
	var tpl struct {
		Resources map[string]struct {
			Type     string
			Metadata struct {
				Guard struct {
					SuppressedRules    []string
					SuppressionReasons map[string]string
				} `json:"guard"`
			}
		}
	}
	if err := json.Unmarshal(raw, &tpl); err != nil {
		return res, fmt.Errorf("cfnguard: %s: %w", path, err)
	}

	cmd := exec.CommandContext(ctx, g.Binary, "validate", "--rules", g.Rules, "--data", path,
		"--output-format", "json", "--show-summary", "none", "--structured")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	// cfn-guard exits 19 (or 5) when a rule fails: findings, not an error.
	var exit *exec.ExitError
	ruleFailed := errors.As(err, &exit) && (exit.ExitCode() == 19 || exit.ExitCode() == 5)
	if err != nil && !ruleFailed {
		return res, fmt.Errorf("cfnguard: %s: %w: %s", g.Binary, err, strings.TrimSpace(stderr.String()))
	}
	findings, err := parse(stdout.Bytes())
	if err != nil {
		return res, err
	}
	var unreasoned []string
	for _, f := range findings {
		r := tpl.Resources[f.Resource]
		f.Type = r.Type
		if slices.Contains(r.Metadata.Guard.SuppressedRules, f.Rule) {
			f.Reason = r.Metadata.Guard.SuppressionReasons[f.Rule]
			res.Suppressed = append(res.Suppressed, f)
			continue
		}
		res.Findings = append(res.Findings, f)
	}
	for id, r := range tpl.Resources {
		for _, rule := range r.Metadata.Guard.SuppressedRules {
			if strings.TrimSpace(r.Metadata.Guard.SuppressionReasons[rule]) == "" {
				unreasoned = append(unreasoned, id+" "+rule)
			}
		}
	}
	if len(unreasoned) > 0 {
		slices.Sort(unreasoned)
		return res, fmt.Errorf("cfnguard: suppressions without a reason: %s", strings.Join(unreasoned, ", "))
	}
	return res, nil
}

var (
	resourcePath = regexp.MustCompile(`^/Resources/([^/]+)`)
	controlID    = regexp.MustCompile(`\[(CT\.[A-Z0-9.]+)\]:\s*(.*)`)
	fixLine      = regexp.MustCompile(`\[FIX\]:\s*(.*)`)
)

// parse reads cfn-guard's --structured JSON: one report per data file,
// each with not_compliant rules whose nested checks (their shape depends
// on how a rule is written) carry the paths of what they looked at and the
// rule's message. One finding per rule and resource.
func parse(out []byte) ([]Finding, error) {
	var reports []struct {
		NotCompliant []map[string]any `json:"not_compliant"`
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(out, &reports); err != nil {
		return nil, fmt.Errorf("cfnguard: cfn-guard output is not the JSON expected: %w", err)
	}
	var findings []Finding
	seen := map[string]bool{}
	for _, rep := range reports {
		for _, nc := range rep.NotCompliant {
			for _, top := range nc { // {"Rule": {...}} or {"Clause": {...}}
				node, _ := top.(map[string]any)
				name, _ := node["name"].(string)
				var resources []string
				var control, desc, fix string
				walk(node, func(key string, v any) {
					switch s, _ := v.(string); key {
					case "path":
						if m := resourcePath.FindStringSubmatch(s); m != nil && !slices.Contains(resources, m[1]) {
							resources = append(resources, m[1])
						}
					case "custom_message":
						if m := controlID.FindStringSubmatch(s); m != nil && control == "" {
							control, desc = m[1], strings.TrimSpace(m[2])
						}
						if m := fixLine.FindStringSubmatch(s); m != nil && fix == "" {
							fix = strings.TrimSpace(m[1])
						}
					}
				})
				if name == "" {
					name = control
				}
				for _, r := range resources {
					if k := name + "\x00" + r; !seen[k] {
						seen[k] = true
						findings = append(findings, Finding{Rule: name, Control: control, Resource: r, Description: desc, Fix: fix})
					}
				}
			}
		}
	}
	slices.SortFunc(findings, func(a, b Finding) int {
		return strings.Compare(a.Rule+"\x00"+a.Resource, b.Rule+"\x00"+b.Resource)
	})
	return findings, nil
}

// walk calls fn on every key and value under v.
func walk(v any, fn func(key string, v any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			fn(k, x)
			walk(x, fn)
		}
	case []any:
		for _, x := range v {
			walk(x, fn)
		}
	}
}
