package redisstore

import (
	"embed"
	"fmt"
	"strings"
)

// scriptFiles holds the Lua scripts and the parts that they include.
//
//go:embed answer.lua fns.lua gcra.lua keyops.lua family.lua window.lua log.lua conc.lua takes.lua fixedread.lua slidingread.lua settle.lua giveback.lua record.lua lease.lua get.lua now.lua tat.lua decide.lua store.lua gcracmd.lua gcralease.lua cmdkey.lua cmdwrite.lua fit.lua nodes.lua share.lua
var scriptFiles embed.FS

// includeMark starts a line that include replaces with a part.
const includeMark = "--> "

// include returns the Lua script in the embedded file name with each line
// "--> part.lua" replaced by that part, indented as the line is and without
// the comments that head it. The parts are text written once and run
// inline at each place that includes it: in Redis, a call of a local
// function costs more than the code itself (see gcra.lua). A missing file
// is a mistake in this package, found when it starts.
func include(name string) string {
	src, err := scriptFiles.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("redisstore: %v", err))
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(string(src), "\n") {
		code := strings.TrimLeft(line, " ")
		part, ok := strings.CutPrefix(strings.TrimSuffix(code, "\n"), includeMark)
		if !ok {
			b.WriteString(line)
			continue
		}
		indent := line[:len(line)-len(code)]
		body := include(part)
		// The part's heading comment describes it for its readers; it is
		// left out of the scripts.
		for strings.HasPrefix(body, "--") {
			_, body, _ = strings.Cut(body, "\n")
		}
		for _, l := range strings.SplitAfter(body, "\n") {
			if strings.TrimSpace(l) != "" {
				b.WriteString(indent)
			}
			b.WriteString(l)
		}
	}
	return b.String()
}
