package app

import (
	"math"
	"strconv"
)

// mbPerVCPU is the memory at which Lambda gives a function one full vCPU;
// it gives memory/1769 of one below that, and more vCPUs above.
const mbPerVCPU = 1769

// lambdaProcs is the GOMAXPROCS a Lambda function runs with: its share of
// vCPUs rounded up (one up to 1,769 MB), unless GOMAXPROCS is set (0:
// leave the runtime's choice). A container serves one invocation at a
// time; the runtime sees two or more CPUs whatever the memory, and with a
// second P each request's hand-offs (the runtime client's HTTP
// connection, the Redis reply) wake and park another thread: under the
// Lambda emulator a purchase cost the seckill bootstrap about a third
// less CPU with one P (make bench, section handler).
func lambdaProcs(getenv func(string) string) int {
	if getenv("GOMAXPROCS") != "" {
		return 0
	}
	mb, err := strconv.ParseFloat(getenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"), 64)
	if err != nil || mb <= 0 {
		return 0
	}
	return int(math.Ceil(mb / mbPerVCPU))
}
