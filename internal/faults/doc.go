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
//     DynamoDB ledger;
//   - network faults from toxiproxy (in process, package toxitest) between
//     the stack and Redis and between the consumer and the provider, on
//     `hourglass serve` and on the AWS wiring: replies later than the
//     client's timeout, connections cut in the middle of a reply or reset,
//     Redis blackholed for 10 s, a provider that stalls after reading the
//     request (it paid; its answer never comes) and then answers 503; and a
//     flash sale through the Redis faults, judged for oversell, lost
//     purchases and stock conservation.
//
// Every toxiproxy run prints one counts line (requests, acked, unknown,
// paid, failed, cancelled, lost, duplicated payouts, paid-but-failed,
// oversold) and the toxics it applied with their durations, and fails if
// any of lost, duplicated, paid-but-failed or oversold is above 0.
package faults
