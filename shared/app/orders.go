package app

import (
	"context"
	"encoding/json"

	"github.com/hourglass/hourglass/shared/orders"
)

// orderPublisher returns the channel of order events: here, each event
// logged as one JSON line.
func (a *App) orderPublisher(_ context.Context) (orders.Publisher, error) {
	log := a.Log
	return orders.PublisherFunc(func(_ context.Context, e orders.Event) error {
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		log.Info("order event", "key", e.Key(), "event", json.RawMessage(line))
		return nil
	}), nil
}
