package cli

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/validation"
)

// preheatFlags names the flag of each field of a preheat request.
var preheatFlags = map[string]string{
	"item_id": "<item>", "stock": "--stock", "starts_at": "--starts", "ends_at": "--ends",
	"per_user_limit": "--per-user-limit", "shards": "--shards",
	"price": "--price", "currency": "--currency", "payment_window_seconds": "--payment-window",
}

func preheatCmd() *cobra.Command {
	var (
		stock, perUser, shards int64
		starts, ends           string
		price, currency        string
		window                 time.Duration
		asJSON                 bool
	)
	cmd := &cobra.Command{
		Use:   "preheat <item> --stock N --ends TIME [--starts TIME] [--per-user-limit N] [--shards N] [--price P --currency C [--payment-window D]]",
		Short: "Set up (or reset) a flash sale",
		Long: `Set up a flash sale of <item>, or reset one, exactly as PUT /v1/seckill/items/{item_id}
does (the same service and rules): --stock units (1..10,000,000) split over
--shards stock shards (1..64; more spread the load over a Redis Cluster),
--per-user-limit units per buyer (1..100), on sale from --starts (default: now)
until --ends. A time is RFC 3339 (2030-01-01T00:00:00Z) or a duration from now
(90m, 2h). With --price (a decimal string) and --currency each order carries its
amount; with --payment-window too (1s..24h, whole seconds) an order awaits
payment that long and expires unpaid, its unit back on sale. Preheating again
drops the earlier sale's buyers and purchases; it is refused while admitted
purchases still wait for their orders or their payment.

Prints the item's state, as GET /v1/seckill/items/{item_id} answers it.`,
		Example: `  hourglass preheat phone-1 --stock 1000 --ends 2030-01-01T00:00:00Z
  hourglass preheat phone-2 --stock 100000 --shards 8 --per-user-limit 2 --starts 10m --ends 2h
  hourglass preheat tea --stock 2 --ends 1h --price 9.99 --currency CNY --payment-window 30s`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			body := map[string]any{"stock": stock}
			if !cmd.Flags().Changed("stock") {
				return usagef("--stock is required")
			}
			if ends == "" {
				return usagef("--ends is required")
			}
			for flag, dst := range map[string]struct {
				value string
				field string
			}{"--starts": {starts, "starts_at"}, "--ends": {ends, "ends_at"}} {
				if dst.value == "" {
					continue
				}
				t, err := parseWhen(dst.value, now)
				if err != nil {
					return usagef("%s: %v", flag, err)
				}
				body[dst.field] = t
			}
			if cmd.Flags().Changed("per-user-limit") {
				body["per_user_limit"] = perUser
			}
			if cmd.Flags().Changed("shards") {
				body["shards"] = shards
			}
			if price != "" {
				body["price"] = price
			}
			if currency != "" {
				body["currency"] = currency
			}
			if cmd.Flags().Changed("payment-window") {
				if window%time.Second != 0 {
					return usagef("--payment-window is whole seconds, not %s", window)
				}
				body["payment_window_seconds"] = int64(window / time.Second)
			}
			raw, err := json.Marshal(body)
			if err != nil {
				return err
			}
			a, done, err := openApp(cmd)
			if err != nil {
				return err
			}
			defer done()
			// Read as PUT /v1/seckill/items/{item_id} reads its body, so a
			// flag breaking a rule is refused in the same words.
			sale, err := httpapi.ParsePreheat(args[0], raw, a.Seckill.Clock().Now(), a.Seckill.Prices())
			var st seckill.State
			if err == nil {
				stop := newProgress(cmd, -1, fmt.Sprintf("preheating %s (%d shard(s))", args[0], shards)).spin()
				st, err = a.Seckill.Preheat(cmd.Context(), sale)
				stop()
			}
			var verr *validation.Error
			switch {
			case errors.As(err, &verr):
				msgs := make([]string, len(verr.Errors))
				for i, f := range verr.Errors {
					name := preheatFlags[f.Field]
					name = cmp.Or(name, f.Field)
					msgs[i] = name + " " + f.Message
				}
				return usagef("%s", strings.Join(msgs, "; "))
			case errors.Is(err, seckill.ErrOrdersPending):
				return fmt.Errorf("%s: admitted purchases still wait for their orders or their payment; preheat again once they are confirmed, paid, expired or released", args[0])
			case errors.Is(err, seckill.ErrPreheatInProgress):
				return fmt.Errorf("%s: another preheat of the item is under way; nothing was changed", args[0])
			case errors.Is(err, seckill.ErrPreheatAbandoned):
				return fmt.Errorf("%s: the preheat outlived its deadline and was finished by recovery (rolled back or forward); check the item with hourglass stats", args[0])
			case err != nil:
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, st)
			}
			_, err = fmt.Fprintln(out, stateLine(st))
			return err
		},
	}
	f := cmd.Flags()
	f.Int64Var(&stock, "stock", 0, "units on sale (required)")
	f.StringVar(&starts, "starts", "", "start of the sale: RFC 3339 or a duration from now (default now)")
	f.StringVar(&ends, "ends", "", "end of the sale: RFC 3339 or a duration from now (required)")
	f.Int64Var(&perUser, "per-user-limit", 1, "units one buyer may buy")
	f.Int64Var(&shards, "shards", 1, "stock shards")
	f.StringVar(&price, "price", "", "price of one unit, a decimal string (with --currency)")
	f.StringVar(&currency, "currency", "", "currency of the price (one of HOURGLASS_CURRENCIES)")
	f.DurationVar(&window, "payment-window", 0, "how long an order may be paid (needs a price), e.g. 15m")
	f.BoolVar(&asJSON, "json", false,
		`print the item state {"item_id","status","stock_left","starts_at","ends_at","per_user_limit","price","currency",`+
			`"payment_window_seconds"} (see `+jsonDoc+`)`)
	return cmd
}

// stateLine is an item's state for people: where the sale stands, then its
// terms (the price and payment window only where the item has them).
func stateLine(st seckill.State) string {
	line := fmt.Sprintf("%s: %s, %d left, on sale %s .. %s, %d per buyer", st.ItemID, st.Status, st.StockLeft,
		st.StartsAt, st.EndsAt, st.PerUserLimit)
	if st.Price != nil && st.Currency != nil {
		line += fmt.Sprintf(", %s %s each", *st.Price, *st.Currency)
	}
	if st.PaymentWindowSeconds != nil {
		line += fmt.Sprintf(", to be paid within %s", time.Duration(*st.PaymentWindowSeconds)*time.Second)
	}
	return line
}

// parseWhen reads an RFC 3339 time, or a duration from now.
func parseWhen(s string, now time.Time) (string, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.Format(time.RFC3339Nano), nil
	}
	d, err := time.ParseDuration(strings.TrimPrefix(s, "+"))
	if err != nil {
		return "", fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
	}
	return now.Add(d).UTC().Format(time.RFC3339Nano), nil
}
