// Package httpreply writes what Funnel's HTTP edges answer about a
// decision: the RateLimit, RateLimit-Policy and Retry-After header fields
// of draft-ietf-httpapi-ratelimit-headers, problem details (RFC 9457) with
// the rate-limit problem types, and the HTTP form of the one fallback
// policy (funnel.FailMode): the status of a fallback (FallbackStatus) and
// of a request whose client went away (Unserved). The HTTP limiter
// (package httplimit, which exports SetHeaders for handlers that call the
// Limiter themselves), the HTTP API and the Envoy rate-limit service use
// it, so that no edge imports another.
package httpreply
