package config

import (
	"fmt"
	"math"
)

// validateTrace checks the tracing settings.
func (c Config) validateTrace() error {
	switch c.TraceProtocol {
	case "", "grpc", "http", "http/protobuf":
	default:
		return fmt.Errorf("%w: trace_protocol %q: want grpc or http", ErrInvalid, c.TraceProtocol)
	}
	if math.IsNaN(c.TraceSampleRate) || c.TraceSampleRate < 0 || c.TraceSampleRate > 1 {
		return fmt.Errorf("%w: trace_sample_rate %v is not between 0 and 1", ErrInvalid, c.TraceSampleRate)
	}
	return nil
}
