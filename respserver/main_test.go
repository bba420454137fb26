package respserver_test

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
)

// storeDown is the reply to a command that the store could not answer, and
// to a fail-closed fallback under FailClosedError: the wire text a client
// reads, written out so that a change to it fails the tests.
const storeDown = "-TRYAGAIN store unavailable: the request was not decided\r\n"

// eventLoopsFlag chooses the serving modes that the suite runs in.
var eventLoopsFlag = flag.String("eventloops", "", "run the suite with this Config.EventLoops only (-1: a goroutine per connection); empty: with 2 event loops, then with goroutines")

// testEventLoops is Config.EventLoops of the servers that startServer
// starts when a test leaves it zero.
var testEventLoops int

// TestMain runs the whole suite twice: with event loops (two, so that
// clients are spread across loops), then with a goroutine per connection.
// Fuzzing, listing and the helper process of TestServerManyIdleClients run
// once.
func TestMain(m *testing.M) {
	flag.Parse()
	modes := []int{2, -1}
	if *eventLoopsFlag != "" {
		n, err := strconv.Atoi(*eventLoopsFlag)
		if err != nil {
			fmt.Fprintf(os.Stderr, "-eventloops %q: %v\n", *eventLoopsFlag, err)
			os.Exit(2)
		}
		modes = []int{n}
	}
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" || flag.Lookup("test.fuzzworker").Value.String() == "true" ||
		flag.Lookup("test.list").Value.String() != "" || os.Getenv(holdEnv) != "" {
		modes = modes[:1]
	}
	code := 0
	for _, n := range modes {
		testEventLoops = n
		if len(modes) > 1 {
			fmt.Printf("resp: the suite with Config.EventLoops %d\n", n)
		}
		if c := m.Run(); c != 0 {
			code = c
		}
	}
	os.Exit(code)
}
