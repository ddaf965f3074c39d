package cli

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func withdrawalsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "withdrawals",
		Short: "Look at one withdrawal, whoever owns it, and move its due time",
		Args:  subcommandArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(withdrawalsShowCmd(), withdrawalsRescheduleCmd())
	return cmd
}

func printWithdrawal(cmd *cobra.Command, w withdrawal.Withdrawal, asJSON bool) error {
	v := httpapi.OperatorViewOf(w)
	out := cmd.OutOrStdout()
	if asJSON {
		return printJSON(out, v)
	}
	p := &printer{w: out}
	p.printf("%s of %s: %s %s %s to %s, due %s (attempts %d, revision %d)\n", v.ID, v.UserID, v.Status,
		v.Amount, v.Currency, v.Destination, v.DueAt, v.Attempts, v.Revision)
	if v.RescheduledBy != "" {
		p.printf("  rescheduled from %s by %s at %s", v.RescheduledFrom, v.RescheduledBy, v.RescheduledAt)
		if v.RescheduleReason != "" {
			p.printf(": %s", v.RescheduleReason)
		}
		p.println()
	}
	if v.FullLastError != "" {
		p.printf("  last error: %s\n", v.FullLastError)
	}
	return p.flush()
}

// withdrawalErr turns a domain refusal into the CLI's answer.
func withdrawalErr(id string, err error) error {
	var verr *validation.Error
	switch {
	case errors.Is(err, withdrawal.ErrNotFound):
		return fmt.Errorf("no withdrawal %s", id)
	case errors.As(err, &verr):
		return usageError{err}
	}
	return err
}

func withdrawalsShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "show <withdrawal id>",
		Short:   "Show a withdrawal with its internal fields (who rescheduled or resolved it, and why)",
		Example: `  hourglass withdrawals show wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z --json`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			w, err := a.Ledger.Find(cmd.Context(), args[0])
			if err != nil {
				return withdrawalErr(args[0], err)
			}
			return printWithdrawal(cmd, w, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the record as JSON")
	return cmd
}

func withdrawalsRescheduleCmd() *cobra.Command {
	var (
		delay      time.Duration
		at, reason string
		by         string
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "reschedule <withdrawal id> (--delay D | --at TIME) --reason WHY",
		Short: "Move the due time of a withdrawal that is not yet being paid, whoever owns it",
		Long: `Move a withdrawal's due time, as its owner can with PATCH /v1/withdrawals/{id}, by
the same rules: --delay from now (0 up to HOURGLASS_MAX_DELAY) or --at an RFC
3339 time (not in the past). It holds while the withdrawal is scheduled, or
retrying with no payout call that may have paid it (a retrying one keeps its
attempts; the new time replaces its retry time); it is refused (exit 1) once it
is being paid out or has ended. The reason and the operator (--by, default the
operating system user) are kept in the record (hourglass withdrawals show), not
shown to the user. A running "hourglass serve" picks an earlier time up at its
next poll (HOURGLASS_POLL_INTERVAL).`,
		Example: `  hourglass withdrawals reschedule wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z --delay 2h --reason "fraud review (ticket 4411)"
  hourglass withdrawals reschedule wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z --at 2026-12-01T18:00:00Z --reason "customer asked by phone"`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("delay") == (at != "") {
				return usagef("give exactly one of --delay <duration> and --at <RFC 3339 time>")
			}
			var due time.Time
			if at != "" {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return usagef("--at %q: not an RFC 3339 time such as 2026-12-01T18:00:00Z", at)
				}
				due = t
			}
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			if due.IsZero() {
				due = a.Clock.Now().Add(delay)
			}
			w, err := a.Service.RescheduleBy(cmd.Context(), args[0], due, cmp.Or(by, operator(cmd.Context())), reason)
			if errors.Is(err, withdrawal.ErrNotReschedulable) {
				return fmt.Errorf("%s is %s and can no longer be rescheduled", w.ID, w.Shown())
			}
			if err != nil {
				return withdrawalErr(args[0], err)
			}
			if asJSON {
				return printWithdrawal(cmd, w, true)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s rescheduled from %s to %s by %s\n", w.ID, clock.Format(w.RescheduledFrom),
				clock.Format(w.DueAt), w.RescheduledBy)
			return err
		},
	}
	cmd.Flags().DurationVar(&delay, "delay", 0, "pay it this long from now (e.g. 90s, 2h)")
	cmd.Flags().StringVar(&at, "at", "", "pay it at this RFC 3339 time")
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; kept in the record)")
	cmd.Flags().StringVar(&by, "by", "", "who reschedules it (default: the operating system user)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the rescheduled record as JSON")
	return cmd
}
