package gcra_test

import (
	"fmt"

	"github.com/funnelrl/funnel/gcra"
)

// GCRA user123 5 10 60, three times in one millisecond, the third with
// TOKENS 5: the reply of each call, and the TAT a store keeps.
func ExampleDecideCommand() {
	p, err := gcra.NewCommandParams(5, 10, 60, 1)
	if err != nil {
		panic(err)
	}
	p5, _ := gcra.NewCommandParams(5, 10, 60, 5)
	const now = 1_795_350_508_971_000 // µs: Redis's command time, a whole ms
	tat, exists := int64(0), false
	for _, q := range []gcra.CommandParams{p, p, p5} {
		newTAT, r, stored, err := gcra.DecideCommand(now, tat, exists, q)
		if err != nil {
			panic(err)
		}
		if stored {
			tat, exists = newTAT, true
		}
		fmt.Println(r.Ints(), "TAT now +", (tat-now)/1e6, "s, expiring at ms", gcra.CommandExpiry(tat))
	}
	// Output:
	// [0 6 5 -1 6] TAT now + 6 s, expiring at ms 1795350514971
	// [0 6 4 -1 12] TAT now + 12 s, expiring at ms 1795350520971
	// [1 6 4 6 12] TAT now + 12 s, expiring at ms 1795350520971
}
