package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/clock"
)

func peekCmd() *cobra.Command {
	var (
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "peek <queue>",
		Short: "List the next due jobs of a queue, without claiming them",
		Long: `List the scheduled jobs of a queue that fall due first, over all its shards,
earliest first. Nothing is claimed or changed. The queue is withdrawals,
sk:<item> (the order queue of a flash-sale item) or seckill-events (order
events of items no longer polled); hourglass stats lists them.
A withdrawal job's id is the withdrawal id.`,
		Example: `  hourglass peek withdrawals
  hourglass peek sk:phone-1 --limit 5 --json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 10_000 {
				return usagef("--limit must be within 1..10000")
			}
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			q, err := findQueue(cmd.Context(), a, args[0])
			if err != nil {
				return err
			}
			jobs, err := q.Peek(cmd.Context(), limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				type job struct {
					Shard int    `json:"shard"`
					ID    string `json:"id"`
					DueAt string `json:"due_at"`
				}
				list := make([]job, len(jobs))
				for i, j := range jobs {
					list[i] = job{Shard: j.Shard, ID: j.ID, DueAt: clock.Format(j.Due)}
				}
				return printJSON(out, map[string]any{"queue": q.Name(), "jobs": list})
			}
			if len(jobs) == 0 {
				_, err := fmt.Fprintf(out, "%s has no scheduled jobs\n", q.Name())
				return err
			}
			now := time.Now()
			t := newTable(out)
			t.println("SHARD\tJOB\tDUE AT\tDUE")
			for _, j := range jobs {
				t.printf("%d\t%s\t%s\t%s\n", j.Shard, j.ID, clock.Format(j.Due), since(j.Due, now))
			}
			return t.flush()
		},
	}
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "how many jobs to list")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"queue","jobs":[{"shard","id","due_at"}]} (see `+jsonDoc+`)`)
	return cmd
}
