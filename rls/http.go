package rls

import (
	"errors"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// MaxJSONBody bounds the body of a request to JSONHandler, in bytes.
const MaxJSONBody = 1 << 20

// JSONHandler returns envoyproxy/ratelimit's /json endpoint, for clients
// that cannot speak gRPC: a POST whose body is a RateLimitRequest in proto3
// JSON is decided as ShouldRateLimit decides it, and answered with the
// RateLimitResponse in proto3 JSON (Content-Type application/json), with
// status 200 OK when its overall_code is OK and 429 Too Many Requests when
// it is OVER_LIMIT.
//
// A body that is not a RateLimitRequest (unknown fields included, as envoy
// refuses them), or a request that ShouldRateLimit refuses as invalid,
// gets 400 Bad Request, a body over MaxJSONBody 413, a method other than
// POST 405; their body is a line of plain text that says why. Where envoy
// answers 400 to every failure, the store's are told apart: 503 Service
// Unavailable when it cannot be reached (or to a client that has gone),
// 504 when the request's deadline passed, 500 otherwise.
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(s.serveJSON)
}

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "rls: /json takes a POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "rls: the body is larger than 1 MiB", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "rls: reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	req, err := parseJSONRequest(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.ShouldRateLimit(r.Context(), req)
	if err != nil {
		st, _ := status.FromError(err)
		http.Error(w, st.Message(), httpStatusOf(st.Code()))
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil { // a response of ours always marshals
		s.warnBug.Do(func(held int64) { s.log.Error("rls: encoding a response as JSON", "err", err, "held_back", held) })
		http.Error(w, "rls: internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if isFallback(resp) {
		w.Header().Set(FallbackHeader, "open")
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// parseJSONRequest decodes a RateLimitRequest in proto3 JSON, strictly:
// unknown fields are an error, as in envoy.
func parseJSONRequest(body []byte) (*rlsv3.RateLimitRequest, error) {
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		return nil, badRequest("the body is not a RateLimitRequest in proto3 JSON: " + err.Error())
	}
	return &req, nil
}

// httpStatusOf maps the gRPC code of a failed decision (see statusOf) to
// the HTTP status of JSONHandler's answer.
func httpStatusOf(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unavailable, codes.Canceled:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// HealthHandler returns envoyproxy/ratelimit's /healthcheck endpoint: 200
// and "OK" while the server is serving (see SetServing), 500 with an empty
// body once it is not (as when it shuts down), whatever the method.
func (s *Server) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !s.serving.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "OK")
	})
}
