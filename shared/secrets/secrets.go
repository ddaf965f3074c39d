// Package secrets reads the functions' secrets (the ElastiCache AUTH token,
// the signing secrets) from AWS Secrets Manager, so they never sit in
// environment variables or templates, and keeps them fresh: a Cached source
// reads a secret again when its TTL runs out or when the key was refused, so
// a rotated secret is picked up by a running function.
//
// A secret's value is one of:
//
//	s3cr3t                                  the key itself (any non-JSON text)
//	{"password":"s3cr3t", …}                a JSON object with the key under
//	                                        "password", "token", "secret" or
//	                                        "value", or as its only string field
//	{"current":"n3w","previous":"0ld"}      a rotation: "current" signs and
//	                                        authenticates; "previous" (optional)
//	                                        is still accepted by verifiers
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

func getInput(id string) *secretsmanager.GetSecretValueInput {
	return &secretsmanager.GetSecretValueInput{SecretId: &id}
}

// jsonKeys are the fields a JSON secret may keep its value under, in order.
var jsonKeys = []string{"password", "token", "secret", "value"}

// Value returns the current key of the secret named by id (ARN or name).
func Value(ctx context.Context, api Getter, id string) (string, error) {
	k, err := Read(ctx, api, id)
	return k.Current, err
}

// Parse reads a secret's value (see the package comment); id only words
// errors, which never quote the value.
func Parse(id, s string) (Keys, error) {
	if s == "" {
		return Keys{}, fmt.Errorf("secrets: %s has no string value", id)
	}
	var obj map[string]any
	if json.Unmarshal([]byte(s), &obj) != nil {
		return Keys{Current: s}, nil
	}
	cur, hasCur := obj["current"].(string)
	prev, _ := obj["previous"].(string)
	if hasCur || prev != "" {
		if cur == "" {
			return Keys{}, fmt.Errorf("secrets: %s %w", id, errNoCurrent)
		}
		return Keys{Current: cur, Previous: prev}, nil
	}
	for _, k := range jsonKeys {
		if v, ok := obj[k].(string); ok && v != "" {
			return Keys{Current: v}, nil
		}
	}
	var only []string
	for _, v := range obj {
		if str, ok := v.(string); ok {
			only = append(only, str)
		}
	}
	if len(only) == 1 && only[0] != "" {
		return Keys{Current: only[0]}, nil
	}
	return Keys{}, errors.New("secrets: " + id + " is a JSON object without a current, password, token, secret or value field")
}
