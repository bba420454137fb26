// Package rules reads rate-limit rules written in envoyproxy/ratelimit's
// YAML format (with Funnel's extensions: algorithm, period, burst, delay,
// ban, calendar windows), matches a request's descriptor to its rule and
// store key as envoy's service does, and keeps the rules of a file or a
// directory loaded while they change.
//
// Parse and Load build an immutable Set, whose Match finds the rule for a
// descriptor; Watch returns a Watcher that reloads the rules when their
// files change and keeps the last good ones in force when a change does
// not load. Build makes a Set from configurations already decoded (as
// package rules/xds receives them from a control plane), with the same
// checks. Every problem in a file is an *Error that wraps ErrInvalid.
package rules
