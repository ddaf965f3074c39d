package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"
)

// smokeTokenEnv holds the user access token smoke calls the user routes
// with: an environment variable keeps it out of the shell history and ps.
const smokeTokenEnv = "HOURGLASS_SMOKE_TOKEN"

// Smoke's defaults. smokeFar must lie beyond the stack's
// HOURGLASS_REDIS_HORIZON (the stack keeps config's default, 1h), so that
// the far withdrawal lives in the ledger alone until the reconciler
// promotes it.
const (
	smokeNear  = time.Minute
	smokeFar   = 2 * time.Hour
	smokeAlarm = "DeadLetterQueueAlarm"
	// smokeCallTimeout bounds one call to the API.
	smokeCallTimeout = 30 * time.Second
)

// smokeOutputs are the stack outputs smoke needs; the others it names
// when the stack has them.
var smokeOutputs = []string{"ApiUrl", "WorkQueueUrl", "DeadLetterQueueUrl", "AlarmTopicArn"}

func smokeCmd() *cobra.Command {
	var o smokeOptions
	cmd := &cobra.Command{
		Use:   "smoke --stack NAME",
		Short: "Prove a deployed stack end to end, up to a page received",
		Long: `Run the smoke test of docs/deploy.md#smoke-test against a deployed stack:

  1. read the stack's outputs (CloudFormation DescribeStacks: ApiUrl,
     WorkQueueUrl, DeadLetterQueueUrl, AlarmTopicArn);
  2. GET /healthz;
  3. create a withdrawal due in --near (1m) and one due in --far (2h, beyond
     the Redis horizon), as the user of the access token;
  4. preheat a flash-sale item of one unit (PUT /v1/seckill/items/{item_id},
     signed with SigV4 by your AWS credentials, which must be one of the
     stack's adminRoleArns) and buy it as the user;
  5. force one consumer failure: send the work queue a message the consumer
     cannot decode, which it fails on every receive until SQS moves it to
     the dead-letter queue;
  6. set the alarm --alarm (DeadLetterQueueAlarm) to ALARM with CloudWatch
     SetAlarmState, so its notification goes to the alarm topic's
     subscribers (alarmEmail);

then print what to check by hand, with the ids it created.

The user access token (one that carries the stack's jwtScope, hourglass/user)
comes from HOURGLASS_SMOKE_TOKEN, or --token; it is never printed. AWS
credentials and region come from the default chain (AWS_PROFILE, AWS_REGION,
...); AWS_ENDPOINT_URL_CLOUDFORMATION, _CLOUDWATCH and _SQS override the
endpoints. See docs/deploy.md#cognito for a token.

Exit status: 0 every step passed; 1 a step failed (what it had created is
printed); 2 a missing token, region or credentials, or no such stack.`,
		Example: `  export HOURGLASS_SMOKE_TOKEN=$(...)   # docs/deploy.md#cognito
  hourglass smoke --stack Hourglass
  make smoke STACK=Hourglass`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.token == "" {
				o.token = strings.TrimSpace(os.Getenv(smokeTokenEnv))
			}
			if err := o.check(); err != nil {
				return err
			}
			s, err := newSmoke(cmd.Context(), o)
			if err != nil {
				return err
			}
			return s.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.stack, "stack", "", "the CloudFormation stack to test (required)")
	f.StringVar(&o.token, "token", "", "a user access token with the stack's jwtScope (default $"+smokeTokenEnv+"; prefer the variable: a flag shows in ps)")
	f.DurationVar(&o.near, "near", smokeNear, "delay of the withdrawal that is paid")
	f.DurationVar(&o.far, "far", smokeFar, "delay of the withdrawal beyond the stack's Redis horizon (HOURGLASS_REDIS_HORIZON, 1h)")
	f.StringVar(&o.amount, "amount", "1.00", "amount of each withdrawal")
	f.StringVar(&o.currency, "currency", "USD", "currency of the withdrawals")
	f.StringVar(&o.destination, "destination", "acct_smoke", "destination of the withdrawals: an account the payout provider pays in tests")
	f.StringVar(&o.alarm, "alarm", smokeAlarm, "the logical id (in infra/monitoring.go) of the stack's alarm to set to ALARM")
	f.BoolVar(&o.asJSON, "json", false, "print the report as JSON (ids, due times, the alarm, the checks)")
	return cmd
}

type smokeOptions struct {
	stack, token                  string
	near, far                     time.Duration
	amount, currency, destination string
	alarm                         string
	asJSON                        bool
}

// logicalID is a CloudFormation logical id, as the CDK derives it from a
// construct's id.
var logicalID = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

func (o smokeOptions) check() error {
	switch {
	case o.stack == "":
		return usagef("--stack is required: the name of the deployed stack (make smoke STACK=Hourglass)")
	case o.token == "":
		return usagef("no user access token: set %s (or pass --token) to an access token that carries the stack's jwtScope; see docs/deploy.md#cognito", smokeTokenEnv)
	case strings.HasPrefix(strings.ToLower(o.token), "bearer "):
		return usagef("%s holds the token alone, without \"Bearer \"", smokeTokenEnv)
	case o.near < 0 || o.near%time.Second != 0 || o.far%time.Second != 0:
		return usagef("--near and --far are whole seconds")
	case o.far <= o.near:
		return usagef("--far (%s) must be later than --near (%s)", o.far, o.near)
	case !logicalID.MatchString(o.alarm):
		return usagef("--alarm %q: want an alarm's logical id, e.g. %s", o.alarm, smokeAlarm)
	}
	return nil
}

// smoke runs the smoke test against one stack.
type smoke struct {
	smokeOptions
	cfn    *cloudformation.Client
	cw     *cloudwatch.Client
	sqs    *sqs.Client
	creds  aws.CredentialsProvider
	region string
	client *http.Client
	now    func() time.Time
	id     string
}

func newSmoke(ctx context.Context, o smokeOptions) (*smoke, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, usageError{fmt.Errorf("AWS configuration: %w", err)}
	}
	if cfg.Region == "" {
		return nil, usagef("no AWS region: set AWS_REGION to the stack's")
	}
	if cfg.Credentials == nil {
		return nil, usagef("no AWS credentials (the default chain found none: AWS_PROFILE, aws sso login, ...)")
	}
	return &smoke{
		smokeOptions: o,
		cfn:          cloudformation.NewFromConfig(cfg),
		cw:           cloudwatch.NewFromConfig(cfg),
		sqs:          sqs.NewFromConfig(cfg),
		creds:        cfg.Credentials,
		region:       cfg.Region,
		client:       &http.Client{Timeout: smokeCallTimeout},
		now:          time.Now,
		id:           strings.ToLower(ulid.Make().String()),
	}, nil
}

// smokeReport is what smoke did, as --json prints it.
type smokeReport struct {
	Stack       string            `json:"stack"`
	Run         string            `json:"run"`
	APIURL      string            `json:"api_url,omitempty"`
	AlarmTopic  string            `json:"alarm_topic_arn,omitempty"`
	ConsumerLog string            `json:"consumer_log_group,omitempty"`
	Withdrawals []smokeWithdrawal `json:"withdrawals"`
	ItemID      string            `json:"item_id,omitempty"`
	PurchaseID  string            `json:"purchase_id,omitempty"`
	Forced      *smokeForced      `json:"forced_failure,omitempty"`
	Alarm       *smokeAlarmSet    `json:"alarm,omitempty"`
	Checks      []string          `json:"checks"`
	Error       string            `json:"error,omitempty"`
}

type smokeWithdrawal struct {
	Role   string `json:"role"` // near or far
	ID     string `json:"id"`
	Status string `json:"status"`
	DueAt  string `json:"due_at"`
}

type smokeForced struct {
	QueueURL        string `json:"queue_url"`
	MessageID       string `json:"message_id"`
	DeadLetterQueue string `json:"dead_letter_queue_url"`
	// DeadLetterAfter is when SQS moves it, at the latest: receives x
	// visibility timeout.
	DeadLetterAfterSeconds int64 `json:"dead_letter_after_seconds"`
	MaxReceives            int64 `json:"max_receives"`
}

type smokeAlarmSet struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// run runs every step, printing each as it passes (JSON: the report at
// the end). A failed step stops the run; what was created is printed
// all the same, so nothing is left unnamed.
func (s *smoke) run(ctx context.Context, w io.Writer) error {
	out := &stickyWriter{w: w}
	rep := &smokeReport{Stack: s.stack, Run: s.id, Withdrawals: []smokeWithdrawal{}, Checks: []string{}}
	say := func(format string, args ...any) {
		if !s.asJSON {
			_, _ = fmt.Fprintf(out, "ok  "+format+"\n", args...)
		}
	}
	err := s.steps(ctx, rep, say)
	rep.Checks = s.checks(rep)
	if err != nil {
		rep.Error = err.Error()
	}
	if s.asJSON {
		_ = printJSON(out, rep)
	} else if len(rep.Checks) > 0 {
		_, _ = fmt.Fprintf(out, "\nsmoke run %s: check by hand\n", rep.Run)
		for i, c := range rep.Checks {
			_, _ = fmt.Fprintf(out, "%2d. %s\n", i+1, c)
		}
	}
	if err == nil && out.err != nil {
		err = fmt.Errorf("writing the report: %w", out.err)
	}
	return err
}

// stickyWriter keeps the first write error, and writes nothing after it.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

func (s *smoke) steps(ctx context.Context, rep *smokeReport, say func(string, ...any)) error {
	outs, err := s.outputs(ctx)
	if err != nil {
		return err
	}
	api, err := apiBase(outs["ApiUrl"])
	if err != nil {
		return err
	}
	rep.APIURL, rep.AlarmTopic, rep.ConsumerLog = api, outs["AlarmTopicArn"], outs["ConsumerLogGroup"]
	say("stack %s: ApiUrl %s", s.stack, api)

	if _, err := s.call(ctx, http.MethodGet, api+"/healthz", nil, nil, http.StatusOK); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	say("GET /healthz: 200")

	for _, w := range []struct {
		role  string
		delay time.Duration
	}{{"near", s.near}, {"far", s.far}} {
		got, err := s.withdraw(ctx, api, w.role, w.delay)
		if err != nil {
			return err
		}
		rep.Withdrawals = append(rep.Withdrawals, got)
		say("withdrawal %s (%s): %s, due %s", got.ID, w.role, got.Status, got.DueAt)
	}

	item := "smoke-" + s.id
	if err := s.preheat(ctx, api, item); err != nil {
		return err
	}
	rep.ItemID = item
	say("preheated %s (1 unit, signed as your AWS identity)", item)
	var p struct {
		PurchaseID string `json:"purchase_id"`
		Status     string `json:"status"`
	}
	raw, err := s.call(ctx, http.MethodPost, api+"/v1/seckill/items/"+item+"/purchases", nil, s.bearer, http.StatusAccepted)
	if err != nil {
		return fmt.Errorf("purchase of %s: %w", item, err)
	}
	if err := json.Unmarshal(raw, &p); err != nil || p.PurchaseID == "" {
		return fmt.Errorf("purchase of %s: answered 202 without a purchase id: %s", item, raw)
	}
	rep.PurchaseID = p.PurchaseID
	say("purchase %s admitted: %s", p.PurchaseID, p.Status)

	forced, err := s.forceFailure(ctx, outs["WorkQueueUrl"], outs["DeadLetterQueueUrl"])
	if err != nil {
		return err
	}
	rep.Forced = forced
	say("sent message %s to the work queue: a body the consumer cannot decode, so it fails on every receive", forced.MessageID)

	name, err := s.findAlarm(ctx)
	if err != nil {
		return err
	}
	_, err = s.cw.SetAlarmState(ctx, &cloudwatch.SetAlarmStateInput{
		AlarmName:   aws.String(name),
		StateValue:  cwtypes.StateValueAlarm,
		StateReason: aws.String("hourglass smoke " + s.id + ": proving that an alarm reaches its subscribers; back to its real state at the next evaluation"),
	})
	if err != nil {
		return fmt.Errorf("set alarm %s to ALARM: %w", name, err)
	}
	rep.Alarm = &smokeAlarmSet{Name: name, State: string(cwtypes.StateValueAlarm)}
	say("alarm %s set to ALARM", name)
	return nil
}

// outputs reads the stack's outputs and requires smokeOutputs.
func (s *smoke) outputs(ctx context.Context) (map[string]string, error) {
	res, err := s.cfn.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(s.stack)})
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationError" && strings.Contains(apiErr.ErrorMessage(), "does not exist") {
		return nil, usagef("stack %q not found in %s (check --stack and AWS_REGION)", s.stack, s.region)
	}
	if err != nil {
		return nil, fmt.Errorf("describe stack %s: %w", s.stack, err)
	}
	if len(res.Stacks) != 1 {
		return nil, usagef("stack %q not found in %s (check --stack and AWS_REGION)", s.stack, s.region)
	}
	outs := map[string]string{}
	for _, o := range res.Stacks[0].Outputs {
		outs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	var missing []string
	for _, k := range smokeOutputs {
		if outs[k] == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("stack %s has no output %s: is it an Hourglass stack, deployed from this version (status %s)?",
			s.stack, strings.Join(missing, ", "), res.Stacks[0].StackStatus)
	}
	return outs, nil
}

// apiBase checks the ApiUrl output: https, or plain http to this machine
// (a local stand-in), since the user's token travels on it.
func apiBase(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("output ApiUrl %q is not a URL", raw)
	}
	local := false
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() || u.Hostname() == "localhost" {
		local = true
	}
	if u.Scheme != "https" && (u.Scheme != "http" || !local) {
		return "", fmt.Errorf("output ApiUrl %q: the token goes only over https", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}

// withdraw creates a withdrawal due in delay and checks what the API
// answered: scheduled, due exactly delay after its creation.
func (s *smoke) withdraw(ctx context.Context, api, role string, delay time.Duration) (smokeWithdrawal, error) {
	body, err := json.Marshal(map[string]any{
		"amount": s.amount, "currency": s.currency, "destination": s.destination, "delay_seconds": int64(delay / time.Second),
	})
	if err != nil {
		return smokeWithdrawal{}, err
	}
	key := "smoke-" + s.id + "-" + role
	raw, err := s.call(ctx, http.MethodPost, api+"/v1/withdrawals", body, func(r *http.Request, b []byte) error {
		r.Header.Set("Idempotency-Key", key)
		return s.bearer(r, b)
	}, http.StatusAccepted)
	if err != nil {
		return smokeWithdrawal{}, fmt.Errorf("create the %s withdrawal (due in %s): %w", role, delay, err)
	}
	var v struct {
		ID        string `json:"id"`
		Status    string `json:"status"`
		DueAt     string `json:"due_at"`
		CreatedAt string `json:"created_at"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || v.ID == "" {
		return smokeWithdrawal{}, fmt.Errorf("create the %s withdrawal: answered 202 without an id: %s", role, raw)
	}
	w := smokeWithdrawal{Role: role, ID: v.ID, Status: v.Status, DueAt: v.DueAt}
	due, err1 := time.Parse(time.RFC3339Nano, v.DueAt)
	created, err2 := time.Parse(time.RFC3339Nano, v.CreatedAt)
	if err1 != nil || err2 != nil || v.Status != "scheduled" || due.Sub(created) != delay {
		return w, fmt.Errorf("withdrawal %s (%s): want scheduled and due %s after its creation, got %s, created %s, due %s",
			v.ID, role, delay, v.Status, v.CreatedAt, v.DueAt)
	}
	return w, nil
}

// preheat sets up item with one unit, on sale now for an hour, through the
// admin route, signed as the caller's AWS identity.
func (s *smoke) preheat(ctx context.Context, api, item string) error {
	body, err := json.Marshal(map[string]any{
		"stock": 1, "per_user_limit": 1, "ends_at": s.now().Add(time.Hour).UTC().Format(time.RFC3339),
	})
	if err != nil {
		return err
	}
	_, err = s.call(ctx, http.MethodPut, api+"/v1/seckill/items/"+item, body, s.sign(api), http.StatusOK)
	if err != nil {
		return fmt.Errorf("preheat %s (signed with your AWS credentials: they must be a session of one of the stack's adminRoleArns): %w", item, err)
	}
	return nil
}

// bearer authenticates a user route with the access token.
func (s *smoke) bearer(r *http.Request, _ []byte) error {
	r.Header.Set("Authorization", "Bearer "+s.token)
	return nil
}

// sign signs an admin call with SigV4, in the API's own region when its
// URL names one.
func (s *smoke) sign(api string) func(*http.Request, []byte) error {
	region := s.region
	if u, err := url.Parse(api); err == nil {
		if parts := strings.Split(u.Hostname(), "."); len(parts) == 6 && parts[1] == "execute-api" {
			region = parts[2]
		}
	}
	return func(r *http.Request, body []byte) error {
		creds, err := s.creds.Retrieve(r.Context())
		if err != nil {
			return usageError{fmt.Errorf("AWS credentials: %w", err)}
		}
		return signExecuteAPI(r.Context(), r, body, creds, region, s.now())
	}
}

// call sends one request and returns the body of an answer of status
// want; another answer is an error naming its problem code and detail.
// Neither the token nor a signature ever appears in an error.
func (s *smoke) call(ctx context.Context, method, target string, body []byte, auth func(*http.Request, []byte) error, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != nil {
		if err := auth(req, body); err != nil {
			return nil, err
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its URL is ours; keep the cause only
		}
		return nil, fmt.Errorf("%s %s: %w", method, req.URL.Path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, req.URL.Path, err)
	}
	if resp.StatusCode != want {
		err := fmt.Errorf("%s %s: %w", method, req.URL.Path, refusal(resp, raw))
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			if strings.HasPrefix(req.Header.Get("Authorization"), "Bearer ") {
				err = fmt.Errorf("%w (the token must be an access token of the stack's jwtIssuer and jwtAudience, unexpired, carrying its jwtScope: see docs/deploy.md#cognito)", err)
			}
		}
		return nil, err
	}
	return raw, nil
}

// forceFailure sends the work queue a body the consumer cannot decode
// (dispatch.DecodeJob refuses an unknown field): the consumer reports it
// failed on every receive, and SQS moves it to the dead-letter queue after
// the redrive policy's maxReceiveCount receives.
func (s *smoke) forceFailure(ctx context.Context, queue, dlq string) (*smokeForced, error) {
	attrs, err := s.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queue),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameVisibilityTimeout, sqstypes.QueueAttributeNameRedrivePolicy},
	})
	if err != nil {
		return nil, fmt.Errorf("read the work queue's settings: %w", err)
	}
	visibility, err := strconv.ParseInt(attrs.Attributes[string(sqstypes.QueueAttributeNameVisibilityTimeout)], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("the work queue's VisibilityTimeout %q: %w", attrs.Attributes["VisibilityTimeout"], err)
	}
	var redrive struct {
		MaxReceiveCount json.Number `json:"maxReceiveCount"`
	}
	var receives int64
	if err := json.Unmarshal([]byte(attrs.Attributes[string(sqstypes.QueueAttributeNameRedrivePolicy)]), &redrive); err == nil {
		receives, err = strconv.ParseInt(redrive.MaxReceiveCount.String(), 10, 64)
		if err != nil {
			receives = 0
		}
	}
	if receives <= 0 {
		return nil, fmt.Errorf("the work queue has no redrive policy (%q): a failed message would never reach the dead-letter queue",
			attrs.Attributes["RedrivePolicy"])
	}
	body, err := json.Marshal(map[string]string{
		"smoke_test": s.id,
		"note":       "sent by hourglass smoke on purpose: the consumer cannot decode it and must fail it until it reaches the dead-letter queue",
	})
	if err != nil {
		return nil, err
	}
	sent, err := s.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(string(body))})
	if err != nil {
		return nil, fmt.Errorf("send the consumer a message it must fail: %w", err)
	}
	return &smokeForced{
		QueueURL: queue, MessageID: aws.ToString(sent.MessageId), DeadLetterQueue: dlq,
		DeadLetterAfterSeconds: receives * visibility, MaxReceives: receives,
	}, nil
}

// cdkHash is the suffix the CDK puts after a construct's id in its
// logical id.
var cdkHash = regexp.MustCompile(`^[0-9A-F]{8}$`)

// findAlarm returns the name of the stack's alarm whose logical id is
// s.alarm (as the CDK writes it: the id, then an 8-digit hash).
func (s *smoke) findAlarm(ctx context.Context) (string, error) {
	var names []string
	p := cloudformation.NewListStackResourcesPaginator(s.cfn, &cloudformation.ListStackResourcesInput{StackName: aws.String(s.stack)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("list the resources of stack %s: %w", s.stack, err)
		}
		for _, r := range page.StackResourceSummaries {
			if aws.ToString(r.ResourceType) != "AWS::CloudWatch::Alarm" {
				continue
			}
			id := aws.ToString(r.LogicalResourceId)
			if rest, ok := strings.CutPrefix(id, s.alarm); ok && (rest == "" || cdkHash.MatchString(rest)) {
				return aws.ToString(r.PhysicalResourceId), nil
			}
			names = append(names, id)
		}
	}
	slices.Sort(names)
	return "", fmt.Errorf("stack %s has no alarm %s (its alarms: %s)", s.stack, s.alarm, strings.Join(names, ", "))
}

// checks is what a person must check by hand, naming what the run
// created.
func (s *smoke) checks(rep *smokeReport) []string {
	var out []string
	api := rep.APIURL
	auth := `-H "Authorization: Bearer $` + smokeTokenEnv + `"`
	if rep.Alarm != nil {
		out = append(out, fmt.Sprintf("the alarm e-mail: alarmEmail (every subscriber of AlarmTopicArn) gets \"ALARM: %s\" within minutes, "+
			"then \"OK\" when the alarm's next evaluation puts it back; nothing arriving means the subscription or the topic policy is wrong "+
			"(aws sns list-subscriptions-by-topic --topic-arn %s: a SubscriptionArn, not PendingConfirmation)", rep.Alarm.Name, rep.AlarmTopic))
	}
	for _, w := range rep.Withdrawals {
		switch w.Role {
		case "near":
			out = append(out, fmt.Sprintf("withdrawal %s is paid about 90 s after its creation (due %s; the poller hands it over within its minute): "+
				"curl -s %s/v1/withdrawals/%s %s shows \"status\":\"paid\" (\"failed\" with last_error: the payout provider refused it)", w.ID, w.DueAt, api, w.ID, auth))
		case "far":
			out = append(out, fmt.Sprintf("withdrawal %s stays \"scheduled\" (due %s, beyond the Redis horizon: the ledger holds it until the reconciler promotes it); "+
				"cancel it when done: curl -s -X DELETE %s/v1/withdrawals/%s %s", w.ID, w.DueAt, api, w.ID, auth))
		}
	}
	if rep.PurchaseID != "" {
		out = append(out, fmt.Sprintf("purchase %s of %s becomes an order within seconds: curl -s %s/v1/seckill/items/%s/purchases/me %s shows \"status\":\"confirmed\"",
			rep.PurchaseID, rep.ItemID, api, rep.ItemID, auth))
	}
	if f := rep.Forced; f != nil {
		logs := "the consumer's log (ConsumerLogGroup)"
		if rep.ConsumerLog != "" {
			logs = fmt.Sprintf("the consumer's log (aws logs tail %s --since 1h --filter-pattern '%q')", rep.ConsumerLog, f.MessageID)
		}
		out = append(out, fmt.Sprintf("message %s: %s says \"undecodable job message\" with message_id %s on each of %d receives; "+
			"after about %s it is in the dead-letter queue (aws sqs get-queue-attributes --queue-url %s --attribute-names ApproximateNumberOfMessages) "+
			"and DeadLetterQueueAlarm pages for real. Remove it: aws sqs receive-message --queue-url %s --max-number-of-messages 10, "+
			"then aws sqs delete-message --queue-url %s --receipt-handle <its ReceiptHandle> for the message whose body holds \"smoke_test\":\"%s\" "+
			"(aws sqs purge-queue --queue-url %s only if it is the only one there: purging drops real dead jobs too)",
			f.MessageID, logs, f.MessageID, f.MaxReceives, time.Duration(f.DeadLetterAfterSeconds)*time.Second, f.DeadLetterQueue,
			f.DeadLetterQueue, f.DeadLetterQueue, rep.Run, f.DeadLetterQueue))
	}
	return out
}
