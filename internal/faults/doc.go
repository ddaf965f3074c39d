// Package faults holds the fault runs (its tests): load runs of withdrawals
// under crashes and outages, each recorded and judged by package history's
// checker, which must find nothing lost and nothing paid twice.
//
//   - SIGKILL of `hourglass serve` (poller and consumer in one process)
//     while jobs are claimed and not yet acked, several times, with restarts;
//   - SIGKILL of a redis-server running with appendonly yes, then restart;
//   - payout provider timeouts, 5xx and 429, and refusals for good;
//   - SQS partial batch failures, failed invocations and duplicate
//     deliveries on the AWS wiring (poller -> SQS -> consumer Lambda handler);
//   - a Redis Cluster master failover (its replica takes over) under the
//     DynamoDB ledger.
package faults
