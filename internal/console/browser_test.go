package console_test

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var screenshots = flag.Bool("screenshots", false, "write the browser test's screenshots into docs/")

// chromium returns the path of Debian's chromium, or skips the test where
// it is not installed (scripts/deps.sh installs it); under CI=true a
// missing browser fails the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (scripts/deps.sh installs it)")
	}
	t.Skip("chromium is not installed here: apt-get install -y chromium, or run scripts/deps.sh")
	return ""
}

// The console in a real browser: a wrong password is refused; the
// decisions counter rises while refused traffic arrives; the key shows in
// the top limited; its ban is lifted with a click and a confirmation, and
// its next request is admitted; an action without the CSRF token is
// refused.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	s := newStack(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first call starts the browser, and lives as long as it: no
	// timeout on it.
	if err := chromedp.Do(bctx, chromedp.Navigate(s.srv.URL+"/ui/")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(20*time.Second))
	}
	const limit = `{"count":10,"period":"1s","burst":0,"ban":"1h"}`
	do("wrong password",
		chromedp.WaitVisible(chromedp.CSS("#password")),
		chromedp.SendKeys(chromedp.CSS("#password"), "not-the-password"),
		chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#login-error")),
	)
	do("log in",
		chromedp.SendKeys(chromedp.CSS("#password"), password),
		chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#live")),
		poll(`document.getElementById("clock").textContent !== "—"`),
	)
	// The rules as a tree, rendered by the server: domain, descriptors,
	// nested descriptors, each rule's rate, algorithm and mode.
	tree, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
		const d = document.querySelector('#rules-tree > li.domain[data-domain="messaging"]');
		const mt = d.querySelector(':scope > ul > li[data-descriptor="message_type=marketing"]');
		const rule = (li) => [li.querySelector(':scope > code.entry').textContent, li.querySelector(':scope > .rule .rate').textContent,
			li.querySelector(':scope > .rule .tag.algorithm').textContent, [...li.querySelectorAll(':scope > .rule .tag.mode')].map(e => e.textContent).join()].join(" | ");
		return [mt.querySelector(':scope > code.entry').textContent, String(mt.querySelector(':scope > .rule') === null),
			rule(mt.querySelector(':scope > ul > li[data-descriptor="to_number"]')),
			rule(mt.querySelector(':scope > ul > li[data-descriptor="from_number"]')),
			rule(d.querySelector(':scope > ul > li[data-descriptor="auth=login"]'))];
	})()`))
	wantTree := []string{"message_type = marketing", "true",
		"to_number (any value) | 5 per 24h0m0s | fixed_window | ",
		"from_number (any value) | 10 per 1m0s, burst 2 | gcra | quota mode,charge over limit",
		"auth = login | 3 per 1s | sliding_window | shadow mode"}
	if err != nil || strings.Join(tree, "\n") != strings.Join(wantTree, "\n") {
		t.Fatalf("rules tree = %q, %v; want %q", tree, err, wantTree)
	}
	before, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#total-decisions")))
	if err != nil || before != "0" {
		t.Fatalf("decisions before the traffic = %q, %v", before, err)
	}
	// Ten a second without burst, banned for an hour once over: the first
	// request passes, the next ones are refused.
	for range 6 {
		s.throttleLimit(t, "mallory", limit)
	}
	do("the counter rises", poll(`Number(document.getElementById("total-decisions").textContent) >= 6`))
	// A rule's decisions over the rate-limit service's /json: a chart of
	// their own, under the edge http and the rule's name (5 a day: the
	// sixth and seventh refused).
	to := `{"key":"message_type","value":"marketing"},{"key":"to_number","value":"+15550100"}`
	for i := range 7 {
		if code, want := s.descriptor(t, to), map[bool]int{true: 200, false: 429}[i < 5]; code != want {
			t.Fatalf("descriptor %d = %d, want %d", i, code, want)
		}
	}
	do("the rule's chart",
		poll(`[...document.querySelectorAll("#charts figcaption")].some(e => e.textContent.startsWith("http · messaging.message_type_marketing.to_number"))`))
	do("mallory in the top limited",
		poll(`[...document.querySelectorAll("#top-table td.key")].some(e => e.textContent === "mallory")`),
		poll(`document.querySelector('#bans-table button.lift[data-key="mallory"]') !== null`),
	)
	if *screenshots {
		// A few seconds of mixed traffic, so that the charts have a shape.
		for i := range 4 {
			clock, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#clock")))
			if err != nil {
				t.Fatal(err)
			}
			for j := range 3 + 2*i {
				s.throttleLimit(t, "user-"+strconv.Itoa(j%3), `{"count":2,"period":"1m","burst":1}`)
				s.throttleLimit(t, "tenant-"+strconv.Itoa(j%2), `{"count":100,"period":"1s","burst":99}`)
			}
			do("next second", poll(`document.getElementById("clock").textContent !== `+strconv.Quote(clock)))
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		writeShot(t, "console-live.png", png)
	}
	if code := s.throttleLimit(t, "mallory", limit); code != 429 {
		t.Fatalf("mallory before the lift = %d, want 429", code)
	}
	do("lift the ban",
		chromedp.Click(chromedp.CSS(`#bans-table button.lift[data-key="mallory"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-yes")),
		chromedp.Click(chromedp.CSS("#confirm-yes")),
		poll(`document.getElementById("status").textContent === "ban lifted: mallory"`),
	)
	if !strings.Contains(s.logs.String(), "user=default action=unban key=mallory") {
		t.Errorf("no audit line: %s", s.logs.String())
	}
	if code := s.throttleLimit(t, "mallory", limit); code != 200 {
		t.Fatalf("mallory after the lift = %d, want 200", code)
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`fetch("/ui/api/unban", {method: "POST", body: new URLSearchParams({key: "mallory"})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if err != nil || status != 403 {
		t.Fatalf("unban without the CSRF token = %d, %v; want 403", status, err)
	}
	// On a phone's screen the page does not scroll sideways (wide tables
	// scroll within themselves).
	do("a phone's screen",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(3)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#live")),
		poll(`document.querySelectorAll("#top-table td.key").length > 0`),
	)
	widths, err := chromedp.Run(ctx, chromedp.Evaluate[[2]int](`[document.documentElement.clientWidth, document.documentElement.scrollWidth]`))
	if err != nil || widths[0] > 400 || widths[1] > widths[0] {
		t.Errorf("on a phone's screen, %d px wide, the page is %d px wide (%v)", widths[0], widths[1], err)
	}
	do("back to a laptop's screen", chromedp.EmulateViewport(1280, 1000), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#live")))
	if *screenshots {
		do("inspect mallory",
			chromedp.SetValue(chromedp.CSS("#inspect-key"), "mallory"),
			chromedp.SetValue(chromedp.CSS(`#inspect-form input[name="period"]`), "1s"),
			chromedp.Click(chromedp.CSS("#inspect-submit")),
			poll(`document.querySelectorAll("#key-state dd").length > 0`),
			chromedp.ScrollIntoView(chromedp.CSS("#inspect")),
		)
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		writeShot(t, "console-inspect.png", png)
	}
}

func writeShot(t *testing.T, name string, png []byte) {
	t.Helper()
	p := filepath.Join("..", "..", "docs", name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", p, len(png))
}
