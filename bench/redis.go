package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is the benchmark's own redis-server: loopback, no persistence.
type server struct {
	cmd  *exec.Cmd
	addr string
	port string
	dir  string
}

func startRedis() (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	dir, err := os.MkdirTemp("", "hourglass-bench-redis")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--logfile", dir+"/redis.log")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &server{cmd: cmd, addr: "127.0.0.1:" + port, port: port, dir: dir}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer func() { _ = c.Close() }()
	for range 200 {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("redis-server did not start")
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

// serverCPU is the CPU seconds redis-server has used (user + system), from
// INFO cpu: with the wall time it tells how busy Redis's one core was.
func serverCPU(ctx context.Context, rdb redis.UniversalClient) (float64, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			total += f
		}
	}
	return total, nil
}

// evalshaBaseline is redis-benchmark's rate of EVALSHA of `return 1` over n
// calls from clients connections: the cost of a script call alone, what
// the admission figures are compared with.
func evalshaBaseline(ctx context.Context, rdb redis.UniversalClient, srv *server, n, clients int) (float64, error) {
	sha, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		return 0, err
	}
	return redisBenchmark(srv, "-q", "-n", strconv.Itoa(n), "-c", strconv.Itoa(clients), "EVALSHA", sha, "0")
}
