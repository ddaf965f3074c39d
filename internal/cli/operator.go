package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/validation"
)

// OperatorRoute is the admin route the operator function serves.
const OperatorRoute = "/v1/admin/operator"

// OperatorDeadline bounds one command the operator function runs: under
// API Gateway's 30 s integration timeout, so a slow command still answers
// with what it printed rather than a bare 503 from the gateway.
const OperatorDeadline = 25 * time.Second

// Bounds of an operator call: a command line is a few words, and what it
// prints must fit in one Lambda response (6 MB) with room to spare.
const (
	maxOperatorArgs    = 32
	maxOperatorArgLen  = 1024
	maxOperatorOutput  = 2 << 20
	operatorOutputTail = "\n… (output cut at 2 MiB: narrow the command, e.g. --limit)\n"
)

// operatorCommands are the commands the operator function runs: those of
// the runbooks that need the stack's Redis and ledger. serve, sign,
// preheat (an API route of its own), withdrawals (a user's business) and
// help are not among them.
var operatorCommands = map[string][]string{
	"payouts":   {"unresolved", "resolve"},
	"reconcile": nil,
	"stats":     nil,
	"dead":      {"list", "requeue", "purge"},
	"peek":      nil,
}

// OperatorCommand reports whether args (a command line without the program
// name) is one of the operator commands: its first word one of them and,
// for a command with subcommands, its second word one of those.
func OperatorCommand(args []string) bool { return operatorRefusal(args) == "" }

// operatorRefusal says why args is not a command the operator function
// runs, or "" when it is one.
func operatorRefusal(args []string) string {
	notOurs := fmt.Sprintf("%q is not an operator command; the operator function runs %s",
		strings.Join(args, " "), operatorCommandList)
	if len(args) == 0 {
		return notOurs
	}
	subs, ok := operatorCommands[args[0]]
	if !ok || (subs != nil && (len(args) < 2 || !slices.Contains(subs, args[1]))) {
		return notOurs
	}
	for _, a := range args {
		if a == "--watch" || strings.HasPrefix(a, "--watch=") {
			// It would redraw into a buffer until the deadline.
			return "stats --watch redraws a terminal until Ctrl-C, which a remote call has not: run stats again instead"
		}
	}
	return ""
}

// operatorCommandList names the operator commands, for refusals.
const operatorCommandList = "payouts unresolved, payouts resolve, reconcile, stats, dead list|requeue|purge, peek"

// inProcess is how the operator function runs a command: on its app, open
// across calls, on behalf of its IAM caller.
type inProcess struct {
	app    *app.App
	caller string
}

type inProcessKey struct{}

// OperatorRequest is the body of POST /v1/admin/operator.
type OperatorRequest struct {
	Args []string `json:"args"`
}

// OperatorResult is the answer of POST /v1/admin/operator: the command's
// exit code and what it printed.
type OperatorResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// Operator serves POST /v1/admin/operator: it runs one operator command on
// App, with its output captured, and logs who ran what.
type Operator struct {
	App *app.App
	Log *slog.Logger
}

// Register adds the operator route to rt, as an admin route (IAM, then the
// operator roles).
func (o Operator) Register(rt *httpapi.Router) {
	rt.Handle(http.MethodPost, OperatorRoute, httpapi.Admin, true, o.run)
}

func (o Operator) run(ctx context.Context, r *httpapi.Request) (events.APIGatewayV2HTTPResponse, error) {
	caller := callerOf(r.Event)
	req, err := parseOperatorRequest(r.Body)
	if err != nil {
		o.Log.LogAttrs(ctx, slog.LevelInfo, "operator command refused",
			slog.String("caller", caller), slog.String("request_id", r.Event.RequestContext.RequestID),
			slog.String("reason", "bad request"))
		return events.APIGatewayV2HTTPResponse{}, err
	}
	if why := operatorRefusal(req.Args); why != "" {
		// Only the command's name is logged: the rest of a command that is
		// not ours (sign --secret ...) might carry what must not be.
		o.Log.LogAttrs(ctx, slog.LevelInfo, "operator command refused",
			slog.String("caller", caller), slog.String("request_id", r.Event.RequestContext.RequestID),
			slog.String("command", commandName(req.Args[0])))
		return events.APIGatewayV2HTTPResponse{}, httpapi.NewProblem(http.StatusBadRequest, httpapi.CodeNotOperatorCommand, why)
	}
	start := time.Now()
	stdout, stderr := &capped{max: maxOperatorOutput}, &capped{max: maxOperatorOutput}
	ctx = context.WithValue(ctx, inProcessKey{}, inProcess{app: o.App, caller: caller})
	code := run(ctx, req.Args, strings.NewReader(""), stdout, stderr)
	o.Log.LogAttrs(ctx, slog.LevelInfo, "operator command",
		slog.String("caller", caller), slog.String("request_id", r.Event.RequestContext.RequestID),
		slog.Any("args", req.Args), slog.Int("exit_code", code),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
	return httpapi.JSON(http.StatusOK, OperatorResult{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String()})
}

// commandWord is what a command's name looks like; anything else (a flag,
// a value) is not logged.
var commandWord = regexp.MustCompile(`^[a-z][a-z-]{0,31}$`)

func commandName(word string) string {
	if commandWord.MatchString(word) {
		return word
	}
	return "(not a command name)"
}

// callerOf is the IAM identity API Gateway authorized (the router has
// checked it is one of the operator roles), or, locally, "admin-token".
func callerOf(ev *events.APIGatewayV2HTTPRequest) string {
	if a := ev.RequestContext.Authorizer; a != nil && a.IAM != nil && a.IAM.UserARN != "" {
		return a.IAM.UserARN
	}
	return "admin-token"
}

// parseOperatorRequest reads {"args": [...]} exactly: unknown fields and
// trailing data are refused, and args must name a command.
func parseOperatorRequest(body []byte) (OperatorRequest, error) {
	var req OperatorRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the object")
	}
	var fields []validation.Field
	switch {
	case err != nil:
		fields = append(fields, validation.Field{Field: "body", Message: "must be one JSON object {\"args\": [\"<command>\", ...]}: " + err.Error()})
	case len(req.Args) == 0:
		fields = append(fields, validation.Field{Field: "args", Message: "must name a command, e.g. [\"payouts\", \"unresolved\"]"})
	case len(req.Args) > maxOperatorArgs:
		fields = append(fields, validation.Field{Field: "args", Message: fmt.Sprintf("must have at most %d words", maxOperatorArgs)})
	default:
		for i, a := range req.Args {
			if len(a) > maxOperatorArgLen {
				fields = append(fields, validation.Field{Field: fmt.Sprintf("args[%d]", i), Message: fmt.Sprintf("must be at most %d bytes", maxOperatorArgLen)})
			}
		}
	}
	if len(fields) > 0 {
		return OperatorRequest{}, &validation.Error{Errors: fields}
	}
	return req, nil
}

// capped keeps the first max bytes written to it, and says so when it
// cut the rest; a command's writes never fail for it.
type capped struct {
	buf bytes.Buffer
	max int
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room < len(p) {
		c.buf.Write(p[:max(room, 0)])
		c.cut = true
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *capped) String() string {
	if c.cut {
		return c.buf.String() + operatorOutputTail
	}
	return c.buf.String()
}
