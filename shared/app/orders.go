package app

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/hourglass/hourglass/shared/orders"
	"github.com/hourglass/hourglass/shared/snstopic"
)

// orderPublisher returns the order events' channel, chosen as Notifier
// chooses finance's: the SNS topic of ORDERS_TOPIC_ARN and the webhook of
// ORDERS_WEBHOOK_URL (signed by Secrets.Orders; both, in that order, when
// both are set), or, where neither is, JSON lines through the App's logger
// on the local stack and an error in a Lambda function: downstream must
// receive every event, and a log line in CloudWatch reaches no one.
func (a *App) orderPublisher(ctx context.Context) (orders.Publisher, error) {
	all, err := channels(ctx, a.Config.OrdersTopicARN, func(api snstopic.API) (orders.Publisher, error) {
		return orders.NewSNS(api, a.Config.OrdersTopicARN)
	}, a.Config.OrdersWebhookURL, func() (orders.Publisher, error) {
		return orders.NewWebhook(orders.WebhookConfig{URL: a.Config.OrdersWebhookURL, Keys: a.Secrets.Orders, Clock: a.Clock})
	})
	if err != nil {
		return nil, err
	}
	switch {
	case len(all) == 1:
		return all[0], nil
	case len(all) > 1:
		return orders.All(all), nil
	case !a.lambda:
		return orders.NewLog(a.Log), nil
	}
	return nil, errors.New("app: set ORDERS_TOPIC_ARN or ORDERS_WEBHOOK_URL: downstream must receive every order event")
}

// channels builds the channels of one kind of message, in the order they
// are told: its topic when topicARN is set (through the SDK's client of the
// environment), then its webhook when hookURL is set.
func channels[T any](ctx context.Context, topicARN string, topic func(snstopic.API) (T, error),
	hookURL string, hook func() (T, error)) ([]T, error) {
	var all []T
	if topicARN != "" {
		awsCfg, err := AWSConfig(ctx)
		if err != nil {
			return nil, err
		}
		t, err := topic(sns.NewFromConfig(awsCfg))
		if err != nil {
			return nil, err
		}
		all = append(all, t)
	}
	if hookURL != "" {
		h, err := hook()
		if err != nil {
			return nil, err
		}
		all = append(all, h)
	}
	return all, nil
}
