package ledger_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/lostreply"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/ledger/ledgertest"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var tableSeq atomic.Int64

// freshTables creates a new set of ledger tables on the dynalite server.
func freshTables(t *testing.T, db *dynalitetest.Server) ledger.Tables {
	t.Helper()
	n := tableSeq.Add(1)
	tables := ledger.Tables{
		Withdrawals: fmt.Sprintf("withdrawals-%d", n), Orders: fmt.Sprintf("orders-%d", n),
		Idempotency: fmt.Sprintf("idempotency-%d", n),
	}
	if err := ledger.CreateTables(context.Background(), db.Client(), tables); err != nil {
		t.Fatal(err)
	}
	return tables
}

func TestDynamoLedgerConformance(t *testing.T) {
	db := dynalitetest.Start(t)
	s := redistest.Start(t)
	rdb := s.Client(t)
	ledgertest.Run(t, func(t *testing.T) ledgertest.Backend {
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		sw := &lostreply.Switch{}
		l := ledger.NewDynamo(sw.Dynamo(db.Client()), freshTables(t, db), q, ledger.DynamoOptions{Logger: slog.New(slog.DiscardHandler)})
		return ledgertest.Backend{Ledger: l, Queue: q, Lose: sw}
	})
}
