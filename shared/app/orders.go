package app

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/hourglass/hourglass/shared/orders"
)

// orderPublisher returns the order events' channel, chosen as Notifier
// chooses finance's: the SNS topic of ORDERS_TOPIC_ARN and the webhook of
// ORDERS_WEBHOOK_URL (signed by Secrets.Orders; both, in that order, when
// both are set), or, where neither is, JSON lines through the App's logger
// on the local stack and an error in a Lambda function: downstream must
// receive every event, and a log line in CloudWatch reaches no one.
func (a *App) orderPublisher(ctx context.Context) (orders.Publisher, error) {
	var all orders.All
	if a.Config.OrdersTopicARN != "" {
		awsCfg, err := AWSConfig(ctx)
		if err != nil {
			return nil, err
		}
		topic, err := orders.NewSNS(sns.NewFromConfig(awsCfg), a.Config.OrdersTopicARN)
		if err != nil {
			return nil, err
		}
		all = append(all, topic)
	}
	if a.Config.OrdersWebhookURL != "" {
		hook, err := orders.NewWebhook(orders.WebhookConfig{
			URL: a.Config.OrdersWebhookURL, Keys: a.Secrets.Orders, Clock: a.Clock,
		})
		if err != nil {
			return nil, err
		}
		all = append(all, hook)
	}
	switch {
	case len(all) == 1:
		return all[0], nil
	case len(all) > 1:
		return all, nil
	case !a.lambda:
		return orders.NewLog(a.Log), nil
	}
	return nil, errors.New("app: set ORDERS_TOPIC_ARN or ORDERS_WEBHOOK_URL: downstream must receive every order event")
}
