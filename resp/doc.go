// Package resp is the Redis protocol (RESP2 and RESP3) codec of a server: a
// Reader that parses the commands a client sends, and a Writer that encodes
// the replies.
//
// The Reader accepts what redis-server accepts: multibulk commands
// ("*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n") and inline commands ("ECHO hi\r\n",
// with redis-cli's quoting), pipelined or split across any number of reads.
// It enforces Limits so that no input can make it allocate without bound, and
// reports malformed input as a *ProtocolError whose Msg is the text Redis
// sends for the same input.
//
// The Writer appends replies to an internal buffer that Flush sends in one
// write. Its protocol version (2 or 3) selects how the RESP3-only types (map,
// set, double, boolean, verbatim string, null) are encoded.
//
// A connection loop runs every command that is already buffered and flushes
// once:
//
//	rd := resp.NewReader(conn, resp.Limits{})
//	wr := resp.NewWriter(conn)
//	for {
//		args, err := rd.ReadCommand()
//		if err != nil {
//			var pe *resp.ProtocolError
//			if errors.As(err, &pe) {
//				wr.WriteError("ERR " + pe.Msg)
//			}
//			wr.Flush()
//			return
//		}
//		handle(wr, args) // args alias rd's buffer: copy what you keep
//		if !rd.Ready() {
//			if err := wr.Flush(); err != nil {
//				return
//			}
//		}
//	}
//
// Neither a Reader nor a Writer is safe for concurrent use; a connection uses
// one of each from one goroutine.
//
// Package github.com/funnelrl/funnel/respserver is the server built on
// this codec.
package resp
