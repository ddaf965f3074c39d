// Package snstopic publishes JSON messages to one SNS topic: finance's
// processed payouts and the order events. It owns what every publisher
// needs: the topic ARN checked once, attributes SNS accepts, and the group
// and de-duplication ids a FIFO topic requires.
package snstopic

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
)

// API is the part of *sns.Client that Topic uses.
type API interface {
	Publish(ctx context.Context, in *sns.PublishInput, optFns ...func(*sns.Options)) (*sns.PublishOutput, error)
}

// arnPattern matches an SNS topic ARN (not a subscription's, which has one more
// part): arn:<partition>:sns:<region>:<account>:<name>[.fifo].
var arnPattern = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:([A-Za-z0-9_-]+(?:\.fifo)?)$`)

// Topic is one SNS topic. It is safe for concurrent use.
type Topic struct {
	api  API
	arn  string
	fifo bool
}

// New returns the Topic of arn, published to through api. name words its
// errors ("<name>: …").
func New(name string, api API, arn string) (*Topic, error) {
	if api == nil {
		return nil, fmt.Errorf("%s: sns needs a client", name)
	}
	if !ValidARN(arn) {
		return nil, fmt.Errorf("%s: %q is not an sns topic arn", name, arn)
	}
	return &Topic{api: api, arn: arn, fifo: strings.HasSuffix(arn, ".fifo")}, nil
}

// ValidARN reports whether arn is an SNS topic's ARN.
func ValidARN(arn string) bool {
	m := arnPattern.FindStringSubmatch(arn)
	return m != nil && len(m[1]) <= 256 // the .fifo suffix counts
}

// Message is one publication.
type Message struct {
	Body []byte
	// Attributes are String message attributes subscribers filter on; empty
	// values are left out (SNS rejects them).
	Attributes map[string]string
	// Group and Dedup are a FIFO topic's MessageGroupId and
	// MessageDeduplicationId; a standard topic ignores them.
	Group, Dedup string
}

// Publish publishes m and returns the SDK's error as it is.
func (t *Topic) Publish(ctx context.Context, m Message) error {
	if t.fifo && (m.Group == "" || m.Dedup == "") {
		return errors.New("snstopic: a fifo topic needs a group and a de-duplication id")
	}
	in := &sns.PublishInput{
		TopicArn:          aws.String(t.arn),
		Message:           aws.String(string(m.Body)),
		MessageAttributes: map[string]types.MessageAttributeValue{},
	}
	for name, v := range m.Attributes {
		if v != "" {
			in.MessageAttributes[name] = types.MessageAttributeValue{
				DataType:    aws.String("String"),
				StringValue: aws.String(v),
			}
		}
	}
	if t.fifo {
		in.MessageGroupId = aws.String(m.Group)
		in.MessageDeduplicationId = aws.String(m.Dedup)
	}
	_, err := t.api.Publish(ctx, in)
	return err
}
