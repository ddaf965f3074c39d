package finance

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Notifier = (*SNS)(nil)

// SNSPublisher is the part of *sns.Client that SNS uses.
type SNSPublisher interface {
	Publish(ctx context.Context, in *sns.PublishInput, optFns ...func(*sns.Options)) (*sns.PublishOutput, error)
}

// topicARNPattern matches an SNS topic ARN (not a subscription's, which has one more
// part): arn:<partition>:sns:<region>:<account>:<name>[.fifo].
var topicARNPattern = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:([A-Za-z0-9_-]+(?:\.fifo)?)$`)

// SNS publishes each message to finance's topic in AWS. Subscribers can filter
// on the message attributes type, status and withdrawal_id.
type SNS struct {
	api   SNSPublisher
	topic string
	fifo  bool
}

// NewSNS returns an SNS publishing to topicARN through api.
func NewSNS(api SNSPublisher, topicARN string) (*SNS, error) {
	if api == nil {
		return nil, errors.New("finance: sns needs a client")
	}
	if !validTopicARN(topicARN) {
		return nil, fmt.Errorf("finance: %q is not an sns topic arn", topicARN)
	}
	return &SNS{api: api, topic: topicARN, fifo: strings.HasSuffix(topicARN, ".fifo")}, nil
}

func validTopicARN(arn string) bool {
	m := topicARNPattern.FindStringSubmatch(arn)
	return m != nil && len(m[1]) <= 256 // the .fifo suffix counts
}

// Notify publishes m. On a FIFO topic the withdrawal id is the group (one
// withdrawal's messages stay in order) and the de-duplication id.
func (s *SNS) Notify(ctx context.Context, m withdrawal.Processed) error {
	body, err := encode(m)
	if err != nil {
		return err
	}
	in := &sns.PublishInput{
		TopicArn:          aws.String(s.topic),
		Message:           aws.String(string(body)),
		MessageAttributes: map[string]types.MessageAttributeValue{},
	}
	for name, v := range map[string]string{
		"type":          m.Type,
		"status":        string(m.Status),
		"withdrawal_id": m.WithdrawalID,
	} {
		// SNS rejects attributes with empty values.
		if v != "" {
			in.MessageAttributes[name] = types.MessageAttributeValue{
				DataType:    aws.String("String"),
				StringValue: aws.String(v),
			}
		}
	}
	if s.fifo {
		in.MessageGroupId = aws.String(m.WithdrawalID)
		in.MessageDeduplicationId = aws.String(m.WithdrawalID)
	}
	if _, err := s.api.Publish(ctx, in); err != nil {
		return fmt.Errorf("finance: publish %s to sns: %w", m.WithdrawalID, err)
	}
	return nil
}
