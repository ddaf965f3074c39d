package fakes

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"
)

// SecretStore stands in for Secrets Manager's GetSecretValue (a
// secrets.Getter): tests change a secret while the process runs.
type SecretStore struct {
	mu     sync.Mutex
	values map[string]string
	reads  map[string]int
	down   bool
	// hold, if set, keeps every read waiting until it is closed; pending
	// counts the reads waiting.
	hold    chan struct{}
	pending int
}

// Hold makes reads wait until the returned release is called.
func (s *SecretStore) Hold() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = make(chan struct{})
	h := s.hold
	return func() {
		s.mu.Lock()
		s.hold = nil
		s.mu.Unlock()
		close(h)
	}
}

// Pending counts the reads held waiting.
func (s *SecretStore) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// NewSecretStore returns a store holding values by secret id.
func NewSecretStore(values map[string]string) *SecretStore {
	s := &SecretStore{values: map[string]string{}, reads: map[string]int{}}
	for k, v := range values {
		s.values[k] = v
	}
	return s
}

// Set changes a secret's value, as put-secret-value does.
func (s *SecretStore) Set(id, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[id] = value
}

// Down makes every read fail (true) or work again (false).
func (s *SecretStore) Down(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// Reads counts the reads of id so far.
func (s *SecretStore) Reads(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[id]
}

// GetSecretValue answers as Secrets Manager does.
func (s *SecretStore) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	s.mu.Lock()
	if h := s.hold; h != nil {
		s.pending++
		s.mu.Unlock()
		<-h
		s.mu.Lock()
		s.pending--
	}
	defer s.mu.Unlock()
	id := *in.SecretId
	s.reads[id]++
	if s.down {
		return nil, &smithy.GenericAPIError{Code: "InternalServiceError", Message: "Secrets Manager is down"}
	}
	v, ok := s.values[id]
	if !ok {
		return nil, &smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "Secrets Manager can't find the specified secret."}
	}
	return &secretsmanager.GetSecretValueOutput{Name: &id, SecretString: &v}, nil
}

// Serve answers Secrets Manager's JSON protocol (GetSecretValue) over HTTP
// until the test ends, for a process that reads its secrets through the
// SDK: point AWS_ENDPOINT_URL_SECRETS_MANAGER (or AWS_ENDPOINT_URL) at the
// URL returned.
func (s *SecretStore) Serve(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ SecretId string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil ||
			r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" {
			http.Error(w, `{"__type":"InvalidRequestException"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		out, err := s.GetSecretValue(r.Context(), &secretsmanager.GetSecretValueInput{SecretId: &in.SecretId})
		if err != nil {
			var api smithy.APIError
			code := "InternalServiceError"
			if errors.As(err, &api) {
				code = api.ErrorCode()
			}
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"ARN": in.SecretId, "Name": in.SecretId, "SecretString": *out.SecretString})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
