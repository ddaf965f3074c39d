package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/hourglass/hourglass/shared/httpapi"
)

// remoteEnv names the deployed API to send the operator commands to, as
// --remote does.
const remoteEnv = "HOURGLASS_REMOTE"

// remoteTimeout bounds one remote call: the function's own deadline
// (OperatorDeadline) plus the way there and back.
const remoteTimeout = OperatorDeadline + 10*time.Second

// remoteTarget reads a leading --remote <url> (or --remote=<url>) off args;
// without one, env (HOURGLASS_REMOTE) names the API for the operator
// commands only, so that serve and sign still run here with it set.
func remoteTarget(args []string, env string) (target string, rest []string, err error) {
	switch {
	case len(args) > 0 && args[0] == "--remote":
		if len(args) < 2 || args[1] == "" {
			return "", nil, usagef("--remote needs the stack's ApiUrl, e.g. --remote https://abc123.execute-api.eu-west-1.amazonaws.com")
		}
		target, rest = args[1], args[2:]
	case len(args) > 0 && strings.HasPrefix(args[0], "--remote="):
		target, rest = strings.TrimPrefix(args[0], "--remote="), args[1:]
		if target == "" {
			return "", nil, usagef("--remote needs the stack's ApiUrl, e.g. --remote https://abc123.execute-api.eu-west-1.amazonaws.com")
		}
	default:
		if env != "" && OperatorCommand(args) {
			return env, args, nil
		}
		return "", args, nil
	}
	if why := operatorRefusal(rest); why != "" {
		return "", nil, usagef("--remote runs only the operator commands: %s", why)
	}
	return target, rest, nil
}

// remote sends operator commands to a deployed stack's operator function,
// signed with SigV4 as the caller's AWS credentials allow.
type remote struct {
	endpoint string // <ApiUrl>/v1/admin/operator
	region   string
	creds    aws.CredentialsProvider
	client   *http.Client
	now      func() time.Time
}

// newRemote resolves the caller's AWS credentials and region from the
// default chain (environment, profile, SSO, instance role). The region,
// when none is set, is the API's own (execute-api.<region>.amazonaws.com).
func newRemote(ctx context.Context, target string) (*remote, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, usagef("--remote %q: want the stack's ApiUrl, https://<api id>.execute-api.<region>.amazonaws.com", target)
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, usageError{fmt.Errorf("AWS configuration: %w", err)}
	}
	region := cfg.Region
	if parts := strings.Split(u.Hostname(), "."); len(parts) == 6 && parts[1] == "execute-api" {
		region = parts[2] // the API's region is the one that signs
	}
	if region == "" {
		return nil, usagef("no AWS region: set AWS_REGION to the stack's")
	}
	return &remote{
		endpoint: strings.TrimRight(target, "/") + OperatorRoute,
		region:   region, creds: cfg.Credentials,
		client: &http.Client{Timeout: remoteTimeout}, now: time.Now,
	}, nil
}

// run sends args and prints what the command printed; the exit code is the
// command's, 1 when the call itself failed, 2 when it was refused as
// usage.
func (r *remote) run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	res, err := r.call(ctx, args)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "hourglass: remote:", err)
		var u usageError
		if errors.As(err, &u) {
			return exitUsage
		}
		return exitFailure
	}
	if _, err := io.WriteString(stdout, res.Stdout); err != nil {
		return exitFailure
	}
	_, _ = fmt.Fprintf(stderr, "hourglass: acted on the stack behind %s (its operator function)\n", r.endpoint)
	_, _ = io.WriteString(stderr, res.Stderr)
	return res.ExitCode
}

func (r *remote) call(ctx context.Context, args []string) (OperatorResult, error) {
	if r.creds == nil {
		return OperatorResult{}, usagef("no AWS credentials (the default chain found none: AWS_PROFILE, aws sso login, ...)")
	}
	creds, err := r.creds.Retrieve(ctx)
	if err != nil {
		return OperatorResult{}, usageError{fmt.Errorf("AWS credentials: %w", err)}
	}
	body, err := json.Marshal(OperatorRequest{Args: args})
	if err != nil {
		return OperatorResult{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint, bytes.NewReader(body))
	if err != nil {
		return OperatorResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if err := signExecuteAPI(ctx, req, body, creds, r.region, r.now()); err != nil {
		return OperatorResult{}, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return OperatorResult{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 3*maxOperatorOutput))
	if err != nil {
		return OperatorResult{}, fmt.Errorf("%s: reading the answer: %w", r.endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return OperatorResult{}, refusal(resp, raw)
	}
	var res OperatorResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return OperatorResult{}, fmt.Errorf("%s answered 200 with no command result: %w", r.endpoint, err)
	}
	return res, nil
}

// signExecuteAPI signs req, whose body is body, with SigV4 for API
// Gateway's IAM authorization (service execute-api) in region.
func signExecuteAPI(ctx context.Context, req *http.Request, body []byte, creds aws.Credentials, region string, now time.Time) error {
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "execute-api", region, now); err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	return nil
}

// refusal describes a non-200 answer: the problem's code and detail, and
// its field errors; a refused command line is a usage error.
func refusal(resp *http.Response, raw []byte) error {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var p httpapi.Problem
	if mt != "application/problem+json" || json.Unmarshal(raw, &p) != nil || p.Code == "" {
		// API Gateway's own refusals ({"message":"Forbidden"}) are no problem documents.
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(raw)))
	}
	msg := fmt.Sprintf("%d %s: %s", resp.StatusCode, p.Code, p.Detail)
	for _, f := range p.Errors {
		msg += fmt.Sprintf("\n  %s: %s", f.Field, f.Message)
	}
	err := errors.New(msg)
	if p.Code == httpapi.CodeNotOperatorCommand || p.Code == httpapi.CodeValidationFailed {
		return usageError{err}
	}
	return err
}
