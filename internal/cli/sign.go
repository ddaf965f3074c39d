package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/signature"
)

func signCmd() *cobra.Command {
	var secret, webhook string
	cmd := &cobra.Command{
		Use:   "sign",
		Short: "Print the X-Hourglass-Signature of a body read from standard input",
		Long: `Print the X-Hourglass-Signature header value (t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">)
of the body on standard input, signed now: what a payout provider sends with its
callbacks (POST /v1/webhooks/payouts), or, with --for payments, what the payment
provider sends with its confirmations (POST /v1/webhooks/payments), to try them by
hand. The secret is --secret, else PAYOUT_WEBHOOK_SECRET (locally
"dev-webhook-secret"), or PAYMENTS_WEBHOOK_SECRET (locally "dev-payments-secret")
with --for payments.`,
		Example: `  BODY='{"event_id":"evt_1","withdrawal_id":"wd_…","status":"paid","payout_id":"po_1"}'
  curl -X POST http://127.0.0.1:8080/v1/webhooks/payouts -H 'Content-Type: application/json' \
    -H "X-Hourglass-Signature: $(printf %s "$BODY" | hourglass sign)" -d "$BODY"

  BODY='{"event_id":"pay_1","order_id":"or_…","status":"succeeded","amount":"9.99","currency":"CNY"}'
  curl -X POST http://127.0.0.1:8080/v1/webhooks/payments -H 'Content-Type: application/json' \
    -H "X-Hourglass-Signature: $(printf %s "$BODY" | hourglass sign --for payments)" -d "$BODY"`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			setting := map[string]string{"payouts": "PAYOUT_WEBHOOK_SECRET", "payments": "PAYMENTS_WEBHOOK_SECRET"}[webhook]
			if setting == "" {
				return usagef("--for is payouts or payments, not %q", webhook)
			}
			if secret == "" {
				cfg, err := config.Load(config.Local)
				if err != nil {
					return usageError{err}
				}
				secret = string(cfg.PayoutWebhookSecret)
				if webhook == "payments" {
					secret = string(cfg.PaymentsWebhookSecret)
				}
			}
			if secret == "" {
				return usagef("no secret: pass --secret or set %s", setting)
			}
			body, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), signature.Sign([]byte(secret), time.Now(), body))
			return err
		},
	}
	cmd.Flags().StringVar(&secret, "secret", "", "the signing secret (default: PAYOUT_WEBHOOK_SECRET, or PAYMENTS_WEBHOOK_SECRET with --for payments)")
	cmd.Flags().StringVar(&webhook, "for", "payouts", "the webhook the body is for: payouts or payments")
	return cmd
}
