package httpreply

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem types of draft-ietf-httpapi-ratelimit-headers, section 5.
const (
	// TypeQuotaExceeded is the type of a refusal because the requests
	// exceed a quota policy (429).
	TypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// TypeTemporaryReducedCapacity is the type of a refusal because the
	// server cannot serve the request for now (503).
	TypeTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	// TypeAbnormalUsageDetected is the type of a refusal because the
	// client's requests look unintentional or malicious, as when its key is
	// banned (429).
	TypeAbnormalUsageDetected = "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"
)

// ProblemContentType is the media type of a Problem (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is a problem details object (RFC 9457), with the
// violated-policies extension member of the rate-limit problem types.
type Problem struct {
	// Type is a URI that identifies the problem type; "" is written as
	// "about:blank" (the problem is only its status).
	Type string `json:"type"`
	// Title is a short summary of the problem type; "" is written as the
	// status's text.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence, for a person.
	Detail string `json:"detail,omitempty"`
	// Instance is a URI that identifies this occurrence.
	Instance string `json:"instance,omitempty"`
	// ViolatedPolicies names the quota policies that refused the request.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// Write sends p as the response: its status, Content-Type
// application/problem+json, and the JSON body. Headers set on w before the
// call (RateLimit, Retry-After) are kept.
func (p Problem) Write(w http.ResponseWriter) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Status == 0 {
		p.Status = http.StatusInternalServerError
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	body, err := json.Marshal(p)
	if err != nil { // strings and ints only: cannot happen
		body = []byte(`{"type":"about:blank","status":500}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Encoding")
	w.WriteHeader(p.Status)
	w.Write(body)
}
