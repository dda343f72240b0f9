// Package browsertest runs Debian's chromium headless for tests of a web
// page, driven over the DevTools protocol (chromedp): a test loads the page,
// waits for what its script rendered and asserts on the DOM. Script errors
// and Content-Security-Policy violations the page causes are collected
// (Browser.Problems), so a test can require a page that runs clean.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otad/otad/internal/testkit/testtool"
)

// Browser is one headless chromium with one tab.
type Browser struct {
	Ctx context.Context // the tab: pass it to chromedp.Run

	mu       sync.Mutex
	problems []string
}

// Start launches chromium (or skips, or under CI fails, when it is not
// installed) with a fresh profile, and closes it at the end of the test.
// Every action run on Ctx is bounded by timeout.
func Start(t testing.TB, timeout time.Duration) *Browser {
	t.Helper()
	bin := testtool.Require(t, "chromium", "chromium")
	// As root (CI, this machine) chromium runs only without its sandbox;
	// nothing it loads comes from outside the test.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &Browser{Ctx: ctx}
	// The first action starts the browser, which lives as long as the
	// context that action ran on: the tab's own, bounded by a timer.
	timer := time.AfterFunc(timeout, cancelTab)
	err := chromedp.Do(ctx, chromedp.Navigate("about:blank"))
	timer.Stop()
	if err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium %s: %v", bin, err)
	}
	// Console subscribes before it returns: nothing the page says after
	// this is lost.
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleError {
				b.note(fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
			}
		}
	}()
	t.Cleanup(func() { cancelTab(); cancelAlloc(); <-done })
	return b
}

func (b *Browser) note(p string) {
	b.mu.Lock()
	b.problems = append(b.problems, p)
	b.mu.Unlock()
}

// Problems are the script exceptions and console errors (a CSP violation
// is one) seen so far.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// Run runs actions on the tab, bounded by timeout; an error ends the test.
func (b *Browser) Run(t testing.TB, timeout time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %s: %v (page problems: %s)", what, err, strings.Join(b.Problems(), "; "))
	}
}

// WaitFor polls the JavaScript expression cond (it must give a boolean)
// until it is true, at most timeout.
func (b *Browser) WaitFor(t testing.TB, timeout time.Duration, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("browser: %s: not within %v (last error %v; page problems: %s)", what, timeout, err, strings.Join(b.Problems(), "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Eval evaluates a JavaScript expression whose value decodes as T.
func Eval[T any](t testing.TB, b *Browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("browser: evaluate %s: %v (page problems: %s)", expr, err, strings.Join(b.Problems(), "; "))
	}
	return v
}

// Screenshot saves the whole page as a PNG under dir and logs its path:
// an artefact of the run (go test -artifacts keeps t.ArtifactDir()).
func (b *Browser) Screenshot(t testing.TB, dir, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	return path
}
