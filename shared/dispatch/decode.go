package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hourglass/hourglass/shared/delayq"
)

// ErrInvalidJob reports a job or message that no consumer could act on. It is
// never worth a retry: the same bytes fail the same way.
var ErrInvalidJob = errors.New("dispatch: invalid job")

// DecodeJob reads a job from a work-queue message body, strictly: a message
// we did not write is refused rather than half understood.
func DecodeJob(body string) (delayq.Job, error) {
	var job delayq.Job
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&job); err != nil {
		return delayq.Job{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return delayq.Job{}, fmt.Errorf("%w: data after the JSON object", ErrInvalidJob)
	}
	if err := validate(&job); err != nil {
		return delayq.Job{}, err
	}
	return job, nil
}

// validate holds what both sides need: the poller sends nothing DecodeJob
// would refuse.
func validate(j *delayq.Job) error {
	switch {
	case j.Kind == "":
		return fmt.Errorf("%w: missing kind", ErrInvalidJob)
	case j.Queue == "":
		return fmt.Errorf("%w: missing queue", ErrInvalidJob)
	case j.ID == "":
		return fmt.Errorf("%w: missing id", ErrInvalidJob)
	case j.Shard < 0:
		return fmt.Errorf("%w: negative shard %d", ErrInvalidJob, j.Shard)
	}
	return nil
}
