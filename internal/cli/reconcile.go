package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/seckill"
)

func reconcileCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reconcile",
		Short: "Repair what Redis lost, once, and print what was repaired",
		Long: `Run one reconciler pass now, as the poller does every HOURGLASS_RECONCILE_INTERVAL:
with the dynamodb ledger, every withdrawal the ledger says is on its way gets its
job back in Redis if Redis lost it (and withdrawals due within
HOURGLASS_REDIS_HORIZON are promoted into Redis, counted as promoted, not as
repairs); then the flash-sale pass
re-enqueues or releases purchases whose order job was lost. It reads the same
environment as serve (REDIS_URL, HOURGLASS_LEDGER, the table names, DYNAMODB_ENDPOINT).
Prints a JSON report; exits 1 when the pass could not complete.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			cfg := a.Config
			stop := newProgress(cmd, -1, "reconciling ("+cfg.Ledger+" ledger)").spin()
			rec, comp, err := a.Reconcile(cmd.Context(), time.Now())
			stop()
			out, _ := json.MarshalIndent(struct {
				Ledger   string                `json:"ledger"`
				Withdraw ledger.Reconciliation `json:"withdrawals"`
				Seckill  seckill.Report        `json:"flash_sale"`
			}{cfg.Ledger, rec, comp}, "", "  ")
			// The report is printed even when reconciling failed part way;
			// that failure is the one to return.
			if _, werr := fmt.Fprintln(cmd.OutOrStdout(), string(out)); err == nil {
				err = werr
			}
			return err
		},
	}
}
