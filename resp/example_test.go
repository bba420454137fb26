package resp_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/funnelrl/funnel/resp"
)

func ExampleReader() {
	// A pipeline: a multibulk command, an inline command with quotes, and a
	// malformed command.
	in := "*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n" +
		"SET greeting \"hello\\tworld\"\r\n" +
		"*1\r\n$x\r\n"
	rd := resp.NewReader(strings.NewReader(in), resp.Limits{})
	for {
		args, err := rd.ReadCommand()
		if err != nil {
			var pe *resp.ProtocolError
			if errors.As(err, &pe) {
				fmt.Printf("-ERR %s\n", pe.Msg)
			}
			return
		}
		fmt.Printf("%q\n", args)
	}
	// Output:
	// ["ECHO" "hello"]
	// ["SET" "greeting" "hello\tworld"]
	// -ERR Protocol error: invalid bulk length
}

func ExampleWriter() {
	var out bytes.Buffer
	w := resp.NewWriter(&out)
	for _, proto := range []int{2, 3} {
		w.SetProtocol(proto)
		w.WriteMap(1)
		w.WriteBulkString("allowed")
		w.WriteBool(true)
		w.WriteNull()
		w.Flush()
		fmt.Printf("RESP%d: %q\n", proto, out.String())
		out.Reset()
	}
	// Output:
	// RESP2: "*2\r\n$7\r\nallowed\r\n:1\r\n$-1\r\n"
	// RESP3: "%1\r\n$7\r\nallowed\r\n#t\r\n_\r\n"
}

func ExampleReader_Ready() {
	// Three commands arrive in one read: run them all, flush once.
	rd := resp.NewReader(strings.NewReader("PING\r\nPING\r\nPING\r\n"), resp.Limits{})
	var out bytes.Buffer
	w := resp.NewWriter(&out)
	for range 3 {
		if _, err := rd.ReadCommand(); err != nil {
			return
		}
		w.WriteSimpleString("PONG")
		if !rd.Ready() {
			fmt.Printf("flush %d bytes\n", w.Buffered())
			w.Flush()
		}
	}
	fmt.Printf("%q\n", out.String())
	// Output:
	// flush 21 bytes
	// "+PONG\r\n+PONG\r\n+PONG\r\n"
}
