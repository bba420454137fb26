package main

import (
	"strings"
	"testing"
)

func TestSnapshotTable(t *testing.T) {
	in := `BenchmarkSnapshot/funnel-1M/write     	       5	 206262031 ns/op	        22.89 B/key	        13.00 key-B	       206.3 ms/op	   73928 B/op	       5 allocs/op
BenchmarkSnapshot/funnel-1M/restore   	       4	 279895372 ns/op	       279.9 ms/op	100743708 B/op	 1002070 allocs/op
BenchmarkSnapshot/all-1.5M/write-2    	       3	 421509471 ns/op	        24.56 B/key	        13.00 key-B	       421.5 ms/op	 1155272 B/op	      11 allocs/op
BenchmarkSnapshot/all-1.5M/restore-2  	       2	1866752314 ns/op	      1866.8 ms/op	182057232 B/op	 2205156 allocs/op
`
	r, _, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	render(&out, r, "")
	for _, want := range []string{
		"| funnel-1M | 1 | 206.3 | 279.9 | yes | 22.89 | 13 | yes |",
		"| all-1.5M | 2 | 421.5 | 1866.8 | no | 24.56 | 13 | yes |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q; output:\n%s", want, out.String())
		}
	}
}
