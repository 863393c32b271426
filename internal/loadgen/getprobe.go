package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/toc-dev/toc/task"
)

// HotGets are the GETs of a hot instant: those sent, those that failed or
// timed out, and the latency of each answered one.
type HotGets struct {
	Gets   int     `json:"gets"`
	Errors int     `json:"errors"`
	LatUs  []int64 `json:"lat_us"`
	// Err says why the GETs could not be made (the probe's process failed).
	Err string `json:"err,omitempty"`
}

func (g HotGets) latencies() []time.Duration {
	ds := make([]time.Duration, len(g.LatUs))
	for i, us := range g.LatUs {
		ds[i] = time.Duration(us) * time.Microsecond
	}
	return ds
}

// GetAtRate GETs ids, round robin, at rate per second from now until ctx is
// done, each in its own goroutine so that a slow answer does not delay the
// next (no coordinated omission); a late wakeup sends every GET due by
// then, where a ticker would drop them. It returns once the GETs sent have
// been answered or timed out ([hotGetTimeout]).
func GetAtRate(ctx context.Context, ids []task.ID, rate float64, get func(ctx context.Context, id task.ID) error) HotGets {
	var (
		mu sync.Mutex // guards g
		g  HotGets
		wg sync.WaitGroup // the GETs in flight, waited for before returning
	)
	defer wg.Wait()
	at := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return g
		case <-timer.C:
			due := int(time.Since(at) / interval)
			for ; sent < due; sent++ {
				if len(ids) == 0 {
					continue // nothing to GET: the run keeps no ids
				}
				id := ids[sent%len(ids)]
				wg.Add(1)
				go func() { // owned by GetAtRate, which waits for it
					defer wg.Done()
					gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hotGetTimeout)
					defer cancel()
					start := time.Now()
					err := get(gctx, id)
					took := time.Since(start)
					mu.Lock()
					defer mu.Unlock()
					g.Gets++
					if err != nil {
						g.Errors++
						return
					}
					g.LatUs = append(g.LatUs, took.Microseconds())
				}()
			}
			timer.Reset(time.Until(at.Add(time.Duration(sent+1) * interval)))
		}
	}
}

// EnvGetProbe, set to 1 in a process's environment, makes toc's command
// (and a test binary that runs a hot instant) a GET probe ([ServeGetProbe])
// instead of what its arguments say: [GetProbe.Run] starts its own
// executable so.
const EnvGetProbe = "TOC_BENCH_GET_PROBE"

// getProbeStart is what a probe reads first: where to GET and how often.
type getProbeStart struct {
	Server string  `json:"server"`
	Token  string  `json:"token,omitempty"`
	Rate   float64 `json:"rate"`
}

// GetProbe makes a hot instant's GETs from another process: a client of
// the server as users' are, not one that waits for a CPU in the server's
// own process (in an embedded run the bench's clients, its receiver and
// the server share one Go scheduler, and a GET's answer waited more for
// its client's goroutines than for the server's).
type GetProbe struct {
	// Exe is the executable to start (os.Executable when empty); it must
	// call [ServeGetProbe] when [EnvGetProbe] is set.
	Exe string
	// Server is the server's base URL and Token its bearer token.
	Server, Token string
}

// Run starts the probe's process, hands it the ids and the rate, and stops
// it when ctx is done: it returns the GETs it made.
func (p GetProbe) Run(ctx context.Context, ids []task.ID, rate float64) (HotGets, error) {
	exe := p.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return HotGets{}, fmt.Errorf("get probe: %w", err)
		}
	}
	// Not CommandContext: the probe stops when its stdin closes, and is
	// waited for; a context's kill would lose the GETs it measured.
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), EnvGetProbe+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return HotGets{}, fmt.Errorf("get probe: %w", err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return HotGets{}, fmt.Errorf("get probe: start %s: %w", exe, err)
	}
	w := bufio.NewWriter(in)
	start, _ := json.Marshal(getProbeStart{Server: p.Server, Token: p.Token, Rate: rate})
	w.Write(start)
	w.WriteByte('\n')
	for _, id := range ids {
		w.WriteString(id.String())
		w.WriteByte('\n')
	}
	w.WriteByte('\n') // the ids end: the GETs begin
	werr := w.Flush()
	if werr == nil {
		<-ctx.Done()
	}
	cerr := in.Close() // the GETs end
	if err := cmd.Wait(); err != nil {
		return HotGets{}, fmt.Errorf("get probe: %w", err)
	}
	if err := errors.Join(werr, cerr); err != nil {
		return HotGets{}, fmt.Errorf("get probe: hand over the ids: %w", err)
	}
	var g HotGets
	if err := json.Unmarshal([]byte(out.String()), &g); err != nil {
		return HotGets{}, fmt.Errorf("get probe: read its answer: %w", err)
	}
	return g, nil
}

// ServeGetProbe is the probe's process ([GetProbe]): it reads the server,
// token and rate as a JSON line from in, then ids one per line until an
// empty line, then GETs them at the rate with get until in ends, and
// writes the GETs it made as JSON to out. newGet makes the function that
// GETs a task by id from server.
func ServeGetProbe(ctx context.Context, in io.Reader, out io.Writer, newGet func(server, token string) func(context.Context, task.ID) error) error {
	r := bufio.NewScanner(in)
	if !r.Scan() {
		return fmt.Errorf("get probe: no start line: %w", errors.Join(r.Err(), io.ErrUnexpectedEOF))
	}
	var start getProbeStart
	if err := json.Unmarshal(r.Bytes(), &start); err != nil {
		return fmt.Errorf("get probe: start line: %w", err)
	}
	if start.Rate <= 0 || start.Server == "" {
		return fmt.Errorf("get probe: start line %q: want a server and a positive rate", r.Text())
	}
	var ids []task.ID
	for r.Scan() && r.Text() != "" {
		id, err := task.ParseID(r.Text())
		if err != nil {
			return fmt.Errorf("get probe: %w", err)
		}
		ids = append(ids, id)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { // owned by ServeGetProbe: it ends once in does, and stop cancels what it waits for
		defer stop()
		for r.Scan() {
		}
	}()
	g := GetAtRate(ctx, ids, start.Rate, newGet(start.Server, start.Token))
	return json.NewEncoder(out).Encode(g)
}
