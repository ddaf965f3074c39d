package cli

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/ops"
)

func statsCmd() *cobra.Command {
	var (
		asJSON   bool
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show queue backlogs, lag, in-flight and dead jobs, and flash-sale stock",
		Long: `Show what GET /v1/admin/stats answers, read straight from Redis: per queue
(withdrawals, sk:<item> for each flash-sale item, seckill-events) the scheduled jobs (due),
those already due (due now), how long the oldest due job has waited, the jobs
claimed and not yet acked (in flight) and the dead ones; per flash-sale item the
stock left, the units admitted, confirmed, awaiting payment, paid and expired.

--json prints them as GET /v1/admin/stats does ("queues" and "items"; the
rate-limit refusals it adds are counted by each API process, not in Redis).
--watch redraws every --interval until Ctrl-C (with --json: one line per
refresh).`,
		Example: `  REDIS_URL=redis://127.0.0.1:6379 hourglass stats
  hourglass stats --watch --interval 1s
  hourglass stats --json | jq '.queues.withdrawals.dead'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usagef("--interval must be positive")
			}
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			redraw := watch && !asJSON && terminal(out)
			for {
				snap, err := snapshot(cmd, a)
				if err != nil {
					if watch && ctx.Err() != nil {
						return nil // interrupted: the end of watching, not a failure
					}
					return err
				}
				switch {
				case asJSON:
					err = printJSON(out, snap)
				case redraw:
					// Home, clear the screen, then the title.
					_, err = fmt.Fprintf(out, "\x1b[H\x1b[2Jhourglass stats  %s  every %s, Ctrl-C to stop\n\n",
						time.Now().Format(time.TimeOnly), interval)
					if err == nil {
						err = printStats(out, snap)
					}
				case watch:
					_, err = fmt.Fprintf(out, "# %s\n", time.Now().UTC().Format(time.RFC3339))
					if err == nil {
						err = printStats(out, snap)
					}
					if err == nil {
						_, err = fmt.Fprintln(out)
					}
				default:
					err = printStats(out, snap)
				}
				if err != nil || !watch {
					return err
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON as GET /v1/admin/stats does")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh period of --watch")
	return cmd
}

func snapshot(cmd *cobra.Command, a *app.App) (ops.Snapshot, error) {
	ctx := cmd.Context()
	qs, err := a.Queues(ctx)
	if err != nil {
		return ops.Snapshot{}, err
	}
	return ops.Collect(ctx, a.Clock.Now(), qs, a.Items)
}

func printStats(w io.Writer, s ops.Snapshot) error {
	t := newTable(w)
	t.println("QUEUE\tDUE\tDUE NOW\tOLDEST DUE LAG\tIN FLIGHT\tDEAD")
	names := make([]string, 0, len(s.Queues))
	for name := range s.Queues {
		names = append(names, name)
	}
	for _, name := range ops.SortQueueNames(names) {
		q := s.Queues[name]
		t.printf("%s\t%d\t%d\t%s\t%d\t%d\n", name, q.Due, q.DueNow,
			roundDuration(time.Duration(q.OldestDueLagMS)*time.Millisecond), q.Inflight, q.Dead)
	}
	if err := t.flush(); err != nil || len(s.Items) == 0 {
		return err
	}
	t.println() // a line without cells: the tabwriter passes it through as is
	t.println("ITEM\tSTOCK LEFT\tADMITTED\tCONFIRMED\tAWAITING PAYMENT\tPAID\tEXPIRED")
	items := make([]string, 0, len(s.Items))
	for item := range s.Items {
		items = append(items, item)
	}
	slices.Sort(items)
	for _, item := range items {
		it := s.Items[item]
		t.printf("%s\t%d\t%d\t%d\t%d\t%d\t%d\n", item, it.StockLeft, it.Admitted, it.Confirmed, it.AwaitingPayment, it.Paid, it.Expired)
	}
	return t.flush()
}
