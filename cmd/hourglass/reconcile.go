package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
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
HOURGLASS_REDIS_HORIZON are promoted into Redis); then the flash-sale pass
re-enqueues or releases purchases whose order job was lost. It reads the same
environment as serve (REDIS_URL, HOURGLASS_LEDGER, the table names, DYNAMODB_ENDPOINT).
Prints a JSON report; exits 1 when the pass could not complete.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(config.Local)
			if err != nil {
				return err
			}
			if err := cfg.Require("REDIS_URL"); err != nil {
				return err
			}
			log := app.NewLogger(cmd.ErrOrStderr(), cfg.SlogLevel())
			if err := app.ResolveSecrets(cmd.Context(), &cfg); err != nil {
				return err
			}
			rdb, err := app.Connect(cfg)
			if err != nil {
				return err
			}
			defer rdb.Close()
			a, err := app.New(cfg, log, rdb)
			if err != nil {
				return err
			}
			rec, comp, err := a.Reconcile(cmd.Context(), time.Now())
			out, _ := json.MarshalIndent(struct {
				Ledger   string                `json:"ledger"`
				Withdraw ledger.Reconciliation `json:"withdrawals"`
				Seckill  seckill.Report        `json:"flash_sale"`
			}{cfg.Ledger, rec, comp}, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return err
		},
	}
}
