// Command infra is Hourglass's CDK app: one stack, Hourglass, holding the
// whole system. `make synth` runs it directly (offline) into cdk.out/;
// `make deploy` runs it through the CDK CLI (infra/cdk.json). Both read the
// "context" block of infra/cdk.json and add -c values on top (make synth's
// SYNTH_ARGS). Both run cdk-nag; run directly, the app then runs cfn-guard's
// Control Tower rules over the template it wrote (guard.go).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/cxapi"
	"github.com/aws/jsii-runtime-go"
)

// stackName is the stack, and the prefix of what it names (the Redis
// replication group, the API, the dashboard).
const stackName = "Hourglass"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
}

func run() error {
	defer jsii.Close()
	root, err := repoRoot()
	if err != nil {
		return err
	}
	ctx, err := fileContext(filepath.Join(root, "infra", "cdk.json"))
	if err != nil {
		return err
	}
	// make synth passes -c key=value pairs (SYNTH_ARGS) as the CLI would.
	if err := argsContext(os.Args[1:], ctx); err != nil {
		return err
	}
	props := &awscdk.AppProps{Context: &ctx}
	// The CLI names the output directory and reports the stack's messages;
	// run directly, the app writes cdk.out at the root and reports them.
	direct := os.Getenv("CDK_OUTDIR") == ""
	if direct {
		props.Outdir = jsii.String(filepath.Join(root, "cdk.out"))
	}
	app := awscdk.NewApp(props)
	settings, err := SettingsFrom(func(key string) any { return app.Node().TryGetContext(jsii.String(key)) })
	if err != nil {
		return err
	}
	// The CLI deploys what it synthesizes: a placeholder would send real
	// withdrawals to example.com, so only `make synth` accepts them.
	if p := settings.Placeholders(); !direct && len(p) > 0 {
		return fmt.Errorf("context %s still hold placeholders: pass real values (cdk deploy -c %s=...), see docs/deploy.md",
			strings.Join(p, ", "), p[0])
	}
	stack, err := NewHourglassStack(app, stackName, &HourglassStackProps{
		Settings: settings,
		CodeDir:  filepath.Join(root, "dist"),
	})
	if err != nil {
		return err
	}
	awscdk.Tags_Of(stack.Stack).Add(jsii.String("project"), jsii.String("hourglass"), nil)
	ApplyNag(app)
	assembly := app.Synth(nil)
	if !direct {
		return nil
	}
	errs := 0
	for _, st := range *assembly.Stacks() {
		for _, m := range *st.Messages() {
			if m.Level == cxapi.SynthesisMessageLevel_INFO {
				continue
			}
			if m.Level == cxapi.SynthesisMessageLevel_ERROR {
				errs++
			}
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", m.Level, *m.Id, m.Entry.Data)
		}
	}
	if errs > 0 {
		return fmt.Errorf("%d synthesis errors (cdk-nag findings are errors: fix them or suppress them with a reason)", errs)
	}
	for _, st := range *assembly.Stacks() {
		res, err := guardTemplate(root, *st.TemplateFullPath())
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "cfn-guard: %d Control Tower rule files, no findings in %s (%d suppressed with a reason)\n",
			res.RuleFiles, *st.StackName(), len(res.Suppressed))
	}
	fmt.Fprintf(os.Stderr, "synthesized %s into %s\n", stackName, *assembly.Directory())
	return nil
}

// repoRoot is the directory of go.mod above the working directory: the
// root when make runs the app, infra/ when the CDK CLI does.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run from the Hourglass repository")
		}
		dir = parent
	}
}

// argsContext adds each -c key=value of args to ctx.
func argsContext(args []string, ctx map[string]any) error {
	for i := 0; i < len(args); i++ {
		if args[i] != "-c" && args[i] != "--context" || i+1 == len(args) {
			return fmt.Errorf("argument %q: want -c key=value", args[i])
		}
		i++
		k, v, ok := strings.Cut(args[i], "=")
		if !ok || k == "" {
			return fmt.Errorf("-c %q: want key=value", args[i])
		}
		ctx[k] = v
	}
	return nil
}

// fileContext is the "context" block of a cdk.json.
func fileContext(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Context == nil {
		f.Context = map[string]any{}
	}
	return f.Context, nil
}
