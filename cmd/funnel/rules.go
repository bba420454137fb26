package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/funnelrl/funnel/rules"
)

const rulesUsage = `Usage:
  funnel rules check [--merge-domains] FILE|DIR...

Checks each rules file, or directory of rules files, as 'funnel serve --rules'
would load it, and starts nothing. Every problem is written to stderr as
  file:line:column: field: why
The exit status is 0 when every argument loads, 1 when one does not, 2 on a
usage error.
`

// rulesCmd runs `funnel rules SUBCOMMAND`.
func rulesCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, rulesUsage)
		return 2
	}
	switch args[0] {
	case "check":
		return rulesCheck(args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, rulesUsage)
		return 0
	}
	fmt.Fprintf(stderr, "funnel rules: unknown command %q\n%s", args[0], rulesUsage)
	return 2
}

// rulesCheck runs `funnel rules check`: each argument is loaded on its own,
// its problems (all of them) written one a line to stderr, and a line that
// says it is ok to stdout when it has none.
func rulesCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("funnel rules check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, rulesUsage) }
	merge := fs.Bool("merge-domains", false, "let several rules files of a directory define one domain, as serve's --rules-merge-domains")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, "funnel rules check: no FILE or DIR given\n", rulesUsage)
		return 2
	}
	code := 0
	for _, path := range fs.Args() {
		set, err := rules.Load(path, rules.Options{MergeDomains: *merge, MaxErrors: -1})
		if err != nil {
			writeProblems(stderr, err)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "%s: ok: %s, %s\n", path, plural(len(set.Domains()), "domain"), plural(len(set.All()), "rule"))
	}
	return code
}

// writeProblems writes each problem of a failed load on a line of its
// own (file:line:column: field: why for those in a rules file).
func writeProblems(w io.Writer, err error) {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		msg := strings.TrimPrefix(e.Error(), "rules: ")
		fmt.Fprintln(w, strings.ReplaceAll(msg, "\n", " "))
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
