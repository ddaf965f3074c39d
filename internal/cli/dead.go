package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ops"
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
		Args: subcommandArgs,
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
			jobs, err := ops.ListDead(ctx, qs, limit)
			if err != nil {
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
			for _, j := range jobs {
				rows = append(rows, row{Queue: j.Queue, Shard: j.Shard, ID: j.ID, DiedAt: clock.Format(j.DiedAt), died: j.DiedAt})
			}
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
	move        ops.Move
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
	move: ops.Requeue,
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
	move: ops.Purge,
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
			ids = ops.Dedupe(ids)
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
			m, err := ops.MoveDead(ctx, q, op.move, a.Clock.Now(), batch, ids, bar.add)
			bar.finish()
			if err != nil {
				return err
			}
			moved, missing := m.IDs, m.NotDead
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

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// findQueue returns the queue named name: withdrawals, sk:<item> of a
// flash-sale item, or the flash sale's seckill-events.
func findQueue(ctx context.Context, a *app.App, name string) (*delayq.Queue, error) {
	qs, err := a.Queues(ctx)
	if err != nil {
		return nil, err
	}
	return ops.FindQueue(qs, name)
}
