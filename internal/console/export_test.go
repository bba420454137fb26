package console

// SampleNow reads the metrics as the sampler does every second, for tests
// that do not wait for it.
func (s *Server) SampleNow() { s.live.sample() }
