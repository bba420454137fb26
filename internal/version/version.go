// Package version holds Funnel's version string.
package version

// Version is Funnel's version. Release builds set it with
// -ldflags "-X github.com/funnelrl/funnel/internal/version.Version=v1.2.3".
var Version = "v0.1.0-dev"
