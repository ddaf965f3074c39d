package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func deadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, requeue or purge jobs that failed every delivery",
		Long: `A job whose every delivery failed (HOURGLASS_MAX_RECEIVES locally; SQS's
maxReceiveCount in AWS) is moved to its queue's dead set, where it waits for an
operator. Look at it (list), fix the cause (a finance endpoint that was down, a
ledger that refused writes), then give it another chance (requeue: due now, the
poller hands it on at once) or drop it (purge).

A payout job is safe to requeue: the payout step is idempotent (one provider
call per withdrawal id, finance keyed by it), so a job that already did part
of its work only finishes the rest. Purging a payout job does not touch the
withdrawal: with the Redis ledger nothing will process it again.

A flash-sale item's queue (sk:<item>) is listed while any of its shards holds
a job, dead ones included: after the item is preheated again (with fewer
shards too) and past its retention, it is not forgotten while a job waits
here. Order events that arise once an item is forgotten (a late payment's
refund) go to the seckill-events queue.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(deadListCmd(), deadMoveCmd(requeueOp), deadMoveCmd(purgeOp))
	return cmd
}

func deadListCmd() *cobra.Command {
	var (
		queue  string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead jobs, longest dead first",
		Long: `List dead jobs of every queue, or of --queue, longest dead first. A withdrawal
job's id is the withdrawal id.`,
		Example: `  hourglass dead list
  hourglass dead list --queue withdrawals --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 10_000 {
				return usagef("--limit must be within 1..10000")
			}
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			var qs []*delayq.Queue
			if queue != "" {
				q, err := findQueue(ctx, a, queue)
				if err != nil {
					return err
				}
				qs = []*delayq.Queue{q}
			} else if qs, err = a.Queues(ctx); err != nil {
				return err
			}
			type row struct {
				Queue  string `json:"queue"`
				Shard  int    `json:"shard"`
				ID     string `json:"id"`
				DiedAt string `json:"died_at"`
				died   time.Time
			}
			var rows []row
			for _, q := range qs {
				jobs, err := q.Dead(ctx, limit)
				if err != nil {
					return err
				}
				for _, j := range jobs {
					rows = append(rows, row{Queue: q.Name(), Shard: j.Shard, ID: j.ID, DiedAt: clock.Format(j.DiedAt), died: j.DiedAt})
				}
			}
			slices.SortStableFunc(rows, func(a, b row) int { return a.died.Compare(b.died) })
			rows = rows[:min(limit, len(rows))]
			out := cmd.OutOrStdout()
			if asJSON {
				if rows == nil {
					rows = []row{}
				}
				return printJSON(out, map[string]any{"jobs": rows})
			}
			if len(rows) == 0 {
				_, err := fmt.Fprintln(out, "no dead jobs")
				return err
			}
			now := time.Now()
			t := newTable(out)
			t.println("QUEUE\tSHARD\tJOB\tDIED AT\tDIED")
			for _, r := range rows {
				t.printf("%s\t%d\t%s\t%s\t%s\n", r.Queue, r.Shard, r.ID, r.DiedAt, since(r.died, now))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", "", "only this queue (withdrawals, sk:<item>, seckill-events); default every queue")
	cmd.Flags().IntVarP(&limit, "limit", "n", 100, "how many jobs to list")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"jobs":[{"queue","shard","id","died_at"}]} (see `+jsonDoc+`)`)
	return cmd
}

// deadOp is requeue or purge.
type deadOp struct {
	name, done, short, long, example string
	// destructive operations ask before they act.
	destructive bool
	run         func(ctx context.Context, q *delayq.Queue, n int, now time.Time, limit int, ids ...string) (delayq.Batch, error)
}

var requeueOp = deadOp{
	name: "requeue", done: "requeued",
	short: "Give dead jobs another chance: due now",
	long: `Move dead jobs back to their queue, due now: the poller hands them on at once
and the consumer runs them again. Name the jobs by id, or take every dead job of
the queue with --all. Work goes in bounded batches (one Lua script each).
Exits 1 if a named job is not in the dead set (the others are requeued).`,
	example: `  hourglass dead requeue --queue withdrawals wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z
  hourglass dead requeue --queue withdrawals --all`,
	run: func(ctx context.Context, q *delayq.Queue, n int, now time.Time, limit int, ids ...string) (delayq.Batch, error) {
		return q.RequeueDead(ctx, n, now, limit, ids...)
	},
}

var purgeOp = deadOp{
	name: "purge", done: "purged", destructive: true,
	short: "Forget dead jobs for good",
	long: `Delete dead jobs: they will not run again. Name the jobs by id, or take every
dead job of the queue with --all. Whatever a job referred to (a withdrawal, a
purchase) is left as it is. On a terminal it asks first; elsewhere it needs
--yes. Exits 1 if a named job is not in the dead set (the others are purged).`,
	example: `  hourglass dead purge --queue withdrawals wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z
  hourglass dead purge --queue sk:phone-1 --all --yes`,
	run: func(ctx context.Context, q *delayq.Queue, n int, _ time.Time, limit int, ids ...string) (delayq.Batch, error) {
		return q.PurgeDead(ctx, n, limit, ids...)
	},
}

func deadMoveCmd(op deadOp) *cobra.Command {
	var (
		queue  string
		all    bool
		yes    bool
		batch  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     op.name + " (--all | <job id>...)",
		Short:   op.short,
		Long:    op.long,
		Example: op.example,
		RunE: func(cmd *cobra.Command, ids []string) error {
			switch {
			case all && len(ids) > 0:
				return usagef("name jobs or give --all, not both")
			case !all && len(ids) == 0:
				return usagef("name the jobs to %s, or give --all", op.name)
			case batch < 1 || batch > delayq.MaxBatch:
				return usagef("--batch must be within 1..%d", delayq.MaxBatch)
			}
			ids = dedupe(ids)
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			q, err := findQueue(ctx, a, queue)
			if err != nil {
				return err
			}
			total := int64(len(ids))
			if all {
				if total, err = q.DeadCount(ctx); err != nil {
					return err
				}
			}
			if op.destructive && !yes && total > 0 {
				if err := confirm(cmd, fmt.Sprintf("%s %d dead job(s) of %s? They will not run again. [y/N] ", op.name, total, q.Name())); err != nil {
					return err
				}
			}
			bar := newProgress(cmd, total, op.name+" "+q.Name())
			var moved []string
			if all {
				moved, err = moveAll(ctx, q, op, a.Clock.Now(), batch, bar)
			} else {
				moved, err = moveNamed(ctx, q, op, a.Clock.Now(), ids, bar)
			}
			bar.finish()
			if err != nil {
				return err
			}
			var missing []string
			for _, id := range ids {
				if !slices.Contains(moved, id) {
					missing = append(missing, id)
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				err = printJSON(out, map[string]any{"queue": q.Name(), op.done: nonNil(moved), "not_dead": nonNil(missing)})
			} else {
				p := &printer{w: out}
				p.printf("%s %d dead job(s) of %s\n", op.done, len(moved), q.Name())
				if op.name == "requeue" && len(moved) > 0 {
					p.println("they are due now: the poller hands them on at its next round")
				}
				err = p.flush()
			}
			if err == nil && len(missing) > 0 {
				err = fmt.Errorf("not in the dead set of %s: %s", q.Name(), strings.Join(missing, ", "))
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", withdrawal.QueueName, "the queue (withdrawals, sk:<item>, seckill-events)")
	cmd.Flags().BoolVar(&all, "all", false, "every dead job of the queue")
	cmd.Flags().IntVar(&batch, "batch", 500, "jobs moved per Lua script call with --all")
	cmd.Flags().BoolVar(&asJSON, "json", false, fmt.Sprintf(`print {"queue","%s":[ids],"not_dead":[ids]}`, op.done))
	if op.destructive {
		cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	}
	return cmd
}

// moveAll moves every dead job of q, shard by shard, a batch per script.
func moveAll(ctx context.Context, q *delayq.Queue, op deadOp, now time.Time, batch int, bar *progress) ([]string, error) {
	var moved []string
	for n := range q.Shards() {
		for {
			b, err := op.run(ctx, q, n, now, batch)
			if err != nil {
				return moved, err
			}
			moved = append(moved, b.IDs...)
			bar.add(len(b.IDs))
			if b.Left == 0 || len(b.IDs) == 0 {
				break
			}
		}
	}
	return moved, nil
}

// moveNamed moves the named dead jobs of q. A job id does not tell its shard,
// so each batch of ids is offered to every shard; a shard moves only the ones
// its dead set holds.
func moveNamed(ctx context.Context, q *delayq.Queue, op deadOp, now time.Time, ids []string, bar *progress) ([]string, error) {
	var moved []string
	for chunk := range slices.Chunk(ids, delayq.MaxBatch) {
		for n := range q.Shards() {
			b, err := op.run(ctx, q, n, now, delayq.MaxBatch, chunk...)
			if err != nil {
				return moved, err
			}
			moved = append(moved, b.IDs...)
			bar.add(len(b.IDs))
		}
	}
	return moved, nil
}

// confirm asks a person at a terminal; without one it refuses, so that a
// script must say --yes.
func confirm(cmd *cobra.Command, question string) error {
	in, ok := cmd.InOrStdin().(*os.File)
	if !ok || !terminal(in) {
		return usagef("not a terminal to ask on: add --yes")
	}
	if _, err := fmt.Fprint(cmd.ErrOrStderr(), question); err != nil {
		return err
	}
	answer, err := bufio.NewReader(io.Reader(in)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("nothing done")
	}
	return nil
}

func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
