// Package dynalitetest starts dynalite, a DynamoDB-compatible server from npm,
// for the DynamoDB ledger's tests: a real server speaking DynamoDB's protocol
// on a free loopback port, one per test. `npm ci` (run by `make test`)
// installs it under node_modules.
package dynalitetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/hourglass/hourglass/internal/proctest"
)

// Server is a dynalite process owned by a test.
type Server struct {
	// Endpoint is its http:// URL.
	Endpoint string
}

// Start spawns dynalite on a free port, through dynalite.js (which keeps it
// up when a client is killed mid-request); it stops with the test.
func Start(t testing.TB) *Server {
	t.Helper()
	launcher, err := find()
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		port := proctest.FreePort(t)
		cmd := exec.Command("node", launcher, strconv.Itoa(port), "127.0.0.1")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("dynalitetest: start node %s: %v", launcher, err)
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if waitFor(addr, 15*time.Second) {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			return &Server{Endpoint: "http://" + addr}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	t.Fatal("dynalitetest: dynalite did not start")
	return nil
}

// Client returns a DynamoDB client of the server.
func (s *Server) Client() *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(s.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
}

// find locates this package's dynalite.js in the module above the working
// directory, and checks that npm installed dynalite beside it.
func find() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bin := filepath.Join(dir, "node_modules", "dynalite", "index.js")
			if _, err := os.Stat(bin); err != nil {
				return "", fmt.Errorf("dynalitetest: %s is missing: run `npm ci` in %s (make test does)", bin, dir)
			}
			return filepath.Join(dir, "internal", "dynalitetest", "dynalite.js"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("dynalitetest: no go.mod above the working directory")
		}
		dir = parent
	}
}

func waitFor(addr string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
