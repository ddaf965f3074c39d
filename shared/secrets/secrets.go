// Package secrets reads the functions' secrets (the ElastiCache AUTH token,
// the signing secrets) from AWS Secrets Manager once, at cold start, so they
// never sit in environment variables or templates.
package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// Getter is the one Secrets Manager call used; *secretsmanager.Client has it.
type Getter interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// jsonKeys are the fields a JSON secret may keep its value under, in order.
var jsonKeys = []string{"password", "token", "secret", "value"}

// Value returns the secret named by id (ARN or name). A secret stored as a
// JSON object yields its "password", "token", "secret" or "value" field (or
// its only string field); any other secret string is the value itself.
func Value(ctx context.Context, api Getter, id string) (string, error) {
	out, err := api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: &id})
	if err != nil {
		return "", fmt.Errorf("secrets: read %s: %w", id, err)
	}
	if out.SecretString == nil || *out.SecretString == "" {
		return "", fmt.Errorf("secrets: %s has no string value", id)
	}
	s := *out.SecretString
	var obj map[string]any
	if json.Unmarshal([]byte(s), &obj) != nil {
		return s, nil
	}
	for _, k := range jsonKeys {
		if v, ok := obj[k].(string); ok && v != "" {
			return v, nil
		}
	}
	var only []string
	for _, v := range obj {
		if str, ok := v.(string); ok {
			only = append(only, str)
		}
	}
	if len(only) == 1 && only[0] != "" {
		return only[0], nil
	}
	return "", errors.New("secrets: " + id + " is a JSON object without a password, token, secret or value field")
}
