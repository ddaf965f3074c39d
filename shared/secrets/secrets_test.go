package secrets_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/hourglass/hourglass/shared/secrets"
)

// fakeSecretsManager speaks Secrets Manager's JSON protocol for GetSecretValue.
func fakeSecretsManager(t *testing.T, values map[string]string) *secretsmanager.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("X-Amz-Target"); got != "secretsmanager.GetSecretValue" {
			t.Errorf("target %q", got)
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256") {
			t.Error("request not signed")
		}
		body, _ := io.ReadAll(r.Body)
		var in struct{ SecretId string }
		_ = json.Unmarshal(body, &in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		v, ok := values[in.SecretId]
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"ResourceNotFoundException","message":"Secrets Manager can't find the specified secret."}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ARN": in.SecretId, "Name": in.SecretId, "SecretString": v})
	}))
	t.Cleanup(srv.Close)
	return secretsmanager.New(secretsmanager.Options{
		Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
	})
}

func TestValue(t *testing.T) {
	api := fakeSecretsManager(t, map[string]string{
		"plain":    "s3cr3t-token-value",
		"password": `{"username":"hourglass","password":"p4ss"}`,
		"token":    `{"token":"t0k3n"}`,
		"only":     `{"whatever":"w"}`,
		"nofield":  `{"a":"1","b":"2"}`,
	})
	ctx := context.Background()
	for id, want := range map[string]string{"plain": "s3cr3t-token-value", "password": "p4ss", "token": "t0k3n", "only": "w"} {
		got, err := secrets.Value(ctx, api, id)
		if err != nil || got != want {
			t.Errorf("Value(%s) = %q, %v; want %q", id, got, err, want)
		}
	}
	for _, id := range []string{"nofield", "missing"} {
		if _, err := secrets.Value(ctx, api, id); err == nil {
			t.Errorf("Value(%s) succeeded", id)
		}
	}
}
