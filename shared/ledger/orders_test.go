package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// The order ledgers' contract: an order id is claimed once, by an order or
// by a void, and a write whose answer was lost, resent, is recognised as
// its own.

// resender makes the next write reach the store twice, as a client library
// does when the first write was applied but its answer lost: the caller
// gets the second answer.
type resender struct{ armed atomic.Bool }

func (r *resender) arm() { r.armed.Store(true) }

// resendingRedis is a go-redis hook: the order ledger writes with a
// pipeline (HSETNX, HGET), which go-redis resends whole after a lost reply.
func (r *resender) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (r *resender) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (r *resender) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if r.armed.CompareAndSwap(true, false) {
			if err := next(ctx, cmds); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// resendingDynamo sends a PutItem twice, as the AWS SDK does after a lost
// answer; with allOld, it answers a failed condition as DynamoDB does (with
// the item that failed it, which dynalite leaves out).
type resendingDynamo struct {
	ledger.DynamoAPI
	r      *resender
	allOld bool
	reads  atomic.Int64
}

func (d *resendingDynamo) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if d.r.armed.CompareAndSwap(true, false) {
		if _, err := d.put(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.put(ctx, in, opts...)
}

func (d *resendingDynamo) put(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := d.DynamoAPI.PutItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	if d.allOld && errors.As(err, &ccf) && in.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld {
		got, gerr := d.DynamoAPI.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName,
			Key: map[string]types.AttributeValue{"id": in.Item["id"]}})
		if gerr != nil {
			return nil, gerr
		}
		ccf.Item = got.Item
	}
	return out, err
}

func (d *resendingDynamo) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	d.reads.Add(1)
	return d.DynamoAPI.GetItem(ctx, in, opts...)
}

type orderLedgerCase struct {
	name   string
	ledger seckill.OrderLedger
	resend *resender
	// reads, if set, counts the ledger's own reads.
	reads *atomic.Int64
}

func orderLedgers(t *testing.T) []orderLedgerCase {
	var cases []orderLedgerCase
	for _, b := range redistest.Backends(t) {
		r := &resender{}
		b.Client.AddHook(r)
		cases = append(cases, orderLedgerCase{name: "redis/" + b.Name, ledger: ledger.NewRedisOrders(b.Client, "hg:"), resend: r})
	}
	db := dynalitetest.Start(t)
	rdb := redistest.Start(t).Client(t)
	q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind})
	if err != nil {
		t.Fatal(err)
	}
	for _, allOld := range []bool{false, true} {
		r := &resender{}
		api := &resendingDynamo{DynamoAPI: db.Client(), r: r, allOld: allOld}
		name := "dynamodb/dynalite"
		if allOld {
			name = "dynamodb/item-with-failed-condition"
		}
		l := ledger.NewDynamo(api, freshTables(t, db), q, ledger.DynamoOptions{Logger: slog.New(slog.DiscardHandler)})
		c := orderLedgerCase{name: name, ledger: l, resend: r}
		if allOld {
			c.reads = &api.reads
		}
		cases = append(cases, c)
	}
	return cases
}

var orderSeq atomic.Int64

func newOrder() seckill.Order {
	pid := seckill.NewPurchaseID(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	return seckill.Order{ID: seckill.OrderID(pid), PurchaseID: pid, ItemID: "phone", UserID: fmt.Sprintf("user-%d", orderSeq.Add(1)),
		Quantity: 1, Shard: 0, CreatedAt: time.Date(2026, 11, 29, 10, 0, 1, 0, time.UTC)}
}

func TestOrderLedgerCreateOrVoid(t *testing.T) {
	ctx := context.Background()
	for _, c := range orderLedgers(t) {
		t.Run(c.name, func(t *testing.T) {
			create := func(o seckill.Order) error { return c.ledger.CreateOrder(ctx, o) }
			void := func(o seckill.Order) bool {
				t.Helper()
				ordered, err := c.ledger.VoidOrder(ctx, o)
				if err != nil {
					t.Fatalf("void: %v", err)
				}
				return ordered
			}
			t.Run("made, then voided", func(t *testing.T) {
				o := newOrder()
				for range 2 {
					if err := create(o); err != nil {
						t.Fatalf("create: %v", err)
					}
				}
				if !void(o) {
					t.Fatal("a void of a made order did not report it")
				}
				if err := create(o); err != nil {
					t.Fatalf("create after a void that found the order: %v", err)
				}
			})
			t.Run("voided, then made", func(t *testing.T) {
				o := newOrder()
				for range 2 {
					if void(o) {
						t.Fatal("a void of an order never made reported it")
					}
				}
				if err := create(o); !errors.Is(err, seckill.ErrOrderVoided) {
					t.Fatalf("create of a voided order: %v, want ErrOrderVoided", err)
				}
			})
			t.Run("create resent after a lost answer", func(t *testing.T) {
				o := newOrder()
				c.resend.arm()
				if err := create(o); err != nil {
					t.Fatalf("resent create: %v, want success (its own write)", err)
				}
				if !void(o) {
					t.Fatal("the resent create made no order")
				}
			})
			t.Run("void resent after a lost answer", func(t *testing.T) {
				o := newOrder()
				c.resend.arm()
				if void(o) {
					t.Fatal("a resent void took its own tombstone for an order")
				}
				if err := create(o); !errors.Is(err, seckill.ErrOrderVoided) {
					t.Fatalf("create after a resent void: %v, want ErrOrderVoided", err)
				}
			})
			t.Run("creates and voids at once", func(t *testing.T) {
				for range 5 {
					o := newOrder()
					var made, voided, ordered, refused atomic.Int64
					var wg sync.WaitGroup
					start := make(chan struct{})
					for i := range 8 {
						wg.Go(func() {
							<-start
							if i%2 == 0 {
								switch err := create(o); {
								case err == nil:
									made.Add(1)
								case errors.Is(err, seckill.ErrOrderVoided):
									refused.Add(1)
								default:
									t.Errorf("create: %v", err)
								}
								return
							}
							switch ordered2, err := c.ledger.VoidOrder(ctx, o); {
							case err != nil:
								t.Errorf("void: %v", err)
							case ordered2:
								ordered.Add(1)
							default:
								voided.Add(1)
							}
						})
					}
					close(start)
					wg.Wait()
					// One write won for everybody: the order (every create
					// succeeds, every void finds it) or the void.
					if (made.Load() != 4 || ordered.Load() != 4) && (refused.Load() != 4 || voided.Load() != 4) {
						t.Fatalf("created %d, refused %d, voided %d, found ordered %d", made.Load(), refused.Load(), voided.Load(), ordered.Load())
					}
				}
			})
			if c.reads != nil && c.reads.Load() != 0 {
				t.Errorf("the ledger read %d items though DynamoDB returned them with the failed condition", c.reads.Load())
			}
		})
	}
}

func TestRedisOrderOfAVoidedID(t *testing.T) {
	ctx := context.Background()
	for _, b := range redistest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			l := ledger.NewRedisOrders(b.Client, "hg:")
			o := newOrder()
			if _, err := l.VoidOrder(ctx, o); err != nil {
				t.Fatal(err)
			}
			if rec, ok, err := l.Order(ctx, o.ItemID, o.Shard, o.ID); err != nil || ok {
				t.Fatalf("a voided id read as an order: %q %t %v", rec, ok, err)
			}
		})
	}
}
