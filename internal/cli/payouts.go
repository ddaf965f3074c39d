package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/ops"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func payoutsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "payouts",
		Short: "List and settle payouts whose outcome the system cannot settle itself",
		Long: `A payout call that got no answer (a timeout, a dropped connection, a consumer
that died in the middle of it) may have paid. Such a withdrawal is never failed
and never cancelled: it shows the user "processing" and is settled by the
provider's status lookup or its callback, and asked again under the same
idempotency key while the provider still remembers the key
(PAYOUT_IDEMPOTENCY_WINDOW, 24h). Past that window, at a provider without a
lookup (PAYOUT_LOOKUP=false), only an operator can settle it: look the payout up
at the provider, then resolve it here. Finance is told of a resolution like of
any outcome.

Withdrawals that keep being refused for our credentials (401, 403) are listed
too: they retry past HOURGLASS_MAX_ATTEMPTS until the credentials are fixed.`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(payoutsUnresolvedCmd(), payoutsResolveCmd())
	return cmd
}

func payoutsUnresolvedCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "unresolved",
		Short: "List withdrawals whose payout may have been made, or that retry past the attempts",
		Example: `  hourglass payouts unresolved
  hourglass payouts unresolved --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			rows, err := ops.ListUnresolved(cmd.Context(), a.Service, a.Config.MaxAttempts, a.Config.PayoutIdempotencyWindow, time.Now())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, map[string]any{"withdrawals": rows})
			}
			if len(rows) == 0 {
				_, err := fmt.Fprintln(out, "no unresolved payouts")
				return err
			}
			t := newTable(out)
			t.println("WITHDRAWAL\tREVISION\tSTATUS\tMAY HAVE PAID\tATTEMPTS\tFIRST SENT\tNEXT\tLAST ERROR")
			for _, r := range rows {
				first := "-"
				if r.FirstSentAt != "" {
					first = r.FirstSentAt
					if r.PastWindow {
						first += " (past the window)"
					}
				}
				t.printf("%s\t%d\t%s\t%v\t%d\t%s\t%s\t%s\n", r.ID, r.Revision, r.Status, r.MayHavePaid, r.Attempts, first, r.NextAt,
					truncate(r.LastError, 80))
			}
			return t.flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false,
		`print {"withdrawals":[{"id","status","revision","may_have_paid","attempts",...}]} (see `+jsonDoc+`)`)
	return cmd
}

func payoutsResolveCmd() *cobra.Command {
	var paid, failed, by string
	var revision int64
	cmd := &cobra.Command{
		Use:   "resolve <withdrawal id> --revision <n> (--paid <payout id> | --failed <reason>)",
		Short: "Settle a withdrawal by hand: the provider paid it, or it did not",
		Long: `Settle a withdrawal whose outcome the system cannot settle itself, from what the
provider's own records say: --paid with the provider's payout id, or --failed
with the reason. The resolution is kept in the ledger with who (--by, default
the operating system user) and when, and finance is told of it like of any
outcome.

--revision is the withdrawal's revision as you judged it ("payouts unresolved"
lists it): if the record moved since (the payout step looked it up, or sent
the request again and it may have paid), the verdict is refused, nothing is
written (exit 1), and you list it again and judge it again.

Only what "payouts unresolved" lists is an operator's to settle: a withdrawal
that a call may have paid (paid or failed), or one that no call may have paid
but that retries past HOURGLASS_MAX_ATTEMPTS (failed only: no money left).
Anything else is refused with the reason and nothing is written (exit 1): a
withdrawal never sent to the provider (scheduled, or cancelled before any
call), one the payout step still settles itself, one whose payout attempt is
running right now (try again after it), one that ended otherwise. Resolving
it as it already ended does nothing.`,
		Example: `  hourglass payouts resolve wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z --revision 7 --paid po_8841
  hourglass payouts resolve wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z --revision 7 --failed "not at the provider (checked 2026-12-01)" --by alice`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (paid == "") == (failed == "") {
				return usagef("give exactly one of --paid <payout id> and --failed <reason>")
			}
			if !cmd.Flags().Changed("revision") {
				return usagef("give --revision <n>: the withdrawal's revision as you judged it (payouts unresolved lists it)")
			}
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			w, err := ops.Resolve(cmd.Context(), a.Service, args[0],
				ops.Verdict{PayoutID: paid, Reason: failed, By: cmp.Or(by, operator(cmd.Context())), Revision: &revision},
				a.Config.MaxAttempts)
			var verr *validation.Error
			switch {
			case errors.Is(err, withdrawal.ErrNotFound):
				return fmt.Errorf("no withdrawal %s", args[0])
			case errors.Is(err, withdrawal.ErrPreconditionFailed):
				return fmt.Errorf("%w; nothing written: list it again (payouts unresolved) and judge it again", err)
			case errors.As(err, &verr):
				return usageError{err}
			case err != nil:
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s is %s (resolved by %s at %s); finance will be told\n",
				w.ID, w.Status, w.ResolvedBy, clock.Format(w.ResolvedAt))
			return err
		},
	}
	cmd.Flags().StringVar(&paid, "paid", "", "the provider paid it: its payout id")
	cmd.Flags().StringVar(&failed, "failed", "", "the provider did not pay it: why")
	cmd.Flags().StringVar(&by, "by", "", "who resolves it (default: the operating system user)")
	cmd.Flags().Int64Var(&revision, "revision", 0, "the withdrawal's revision as you judged it (payouts unresolved lists it)")
	return cmd
}

// operator names who runs the command: the IAM caller of the operator
// function, else the person at the terminal.
func operator(ctx context.Context) string {
	if in, ok := ctx.Value(inProcessKey{}).(inProcess); ok && in.caller != "" {
		return in.caller
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return cmp.Or(os.Getenv("USER"), "operator")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
