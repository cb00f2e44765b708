package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The scale scenario's outputs: the tables on stdout and, in -scale-out (docs/benchmarks), scale.md
// (the same tables, with commit and date) and scale-rss.svg (peak RSS against Pods).
const (
	scaleTableFile = "scale.md"
	scaleSVGFile   = "scale-rss.svg"
)

// The memory table's columns that readScaleRSS reads back (scale-plot).
const (
	colPods       = "Pods"
	colWatch      = "configmap-attacher, through the watch"
	colAnew       = "configmap-attacher, started anew"
	colLimited    = "ours with GOMEMLIMIT (sizing rule), started anew"
	colKCM        = "kube-controller-manager"
	colRSOperator = "configmap-rs-operator (watch / anew)"
	colReloader   = "Reloader (watch / anew)"
	colBaseline   = "baseline build (watch / anew)"
)

// withCommas writes n as 150,000.
func withCommas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func podsLabel(n int) string { return withCommas(n) + " Pods" }

func ratioTo(ours, other int64) string {
	if ours <= 0 || other <= 0 {
		return "—"
	}
	return fmt.Sprintf("1/%.1f", float64(other)/float64(ours))
}

func mibOrDash(b int64) string {
	if b <= 0 {
		return "—"
	}
	return mib(b)
}

// scaleTables renders the memory table and the time/load table.
func scaleTables(steps []scaleStep, baseline int64) [][][]string {
	mem := [][]string{{colPods, "nodes", colWatch, colAnew, "KiB per Pod (anew − empty cluster)",
		"MiB per 10,000 Pods (anew − empty cluster)",
		"ours, live heap (watch / anew)", colLimited, "with GOMEMLIMIT / kube-controller-manager",
		colKCM, "ours / kube-controller-manager", colRSOperator, colReloader, "ours / best peer",
		colBaseline}}
	limits := variantNames(steps)
	for _, name := range limits {
		mem[0] = append(mem[0], "ours with "+strings.TrimPrefix(name, variantPrefix)+" (watch / anew; CPU through the watch)")
	}
	load := [][]string{{"Pods", "built in", "load average at start", "ours CPU (growth / start)", "caches synced", "first attach", "baseline build: caches synced",
		"kwok stopped: load average, caches synced, first attach, peak RSS",
		"API requests at start: LISTs / watches opened",
		"attach p50 / p99 ÷ floor", "webhook p50 / p99, with ÷ without", "admission policies p50 / p99, with ÷ without", "kube-apiserver RSS", "etcd RSS", "step took"}}
	for _, s := range steps {
		peer := func(name string) string {
			w, a := s.peersWatch[name], s.peersStart[name]
			if w == 0 && a == 0 {
				return "—"
			}
			return mibOrDash(w) + " / " + mibOrDash(a)
		}
		best := int64(0)
		for _, m := range []map[string]int64{s.peersWatch, s.peersStart} {
			for name, v := range m {
				if name != baselineName && name != limitedName && !isVariant(name) && v > 0 && (best == 0 || v < best) {
					best = v
				}
			}
		}
		oursMax := max(s.watchRSS, s.startRSS)
		perPod := float64(s.startRSS-baseline) / 1024 / float64(s.pods)
		perPodKiB, per10k := fmt.Sprintf("%.2f", perPod), fmt.Sprintf("%.1f", perPod*10000/1024)
		if baseline < 0 { // resumed: no empty cluster measured
			perPodKiB, per10k = "—", "—"
		}
		row := []string{podsLabel(s.pods), withCommas(s.nodes), mib(s.watchRSS), mib(s.startRSS), perPodKiB, per10k,
			mibOrDash(s.watchHeap) + " / " + mibOrDash(s.startHeap),
			fmt.Sprintf("%s (limit %s)", mibOrDash(s.peersStart[limitedName]), mibOrDash(s.limit)), ratioTo(s.peersStart[limitedName], s.kcm), mibOrDash(s.kcm), ratioTo(oursMax, s.kcm), peer(rsOperator), peer("reloader"), ratioTo(oursMax, best), peer(baselineName)}
		for _, name := range limits {
			row = append(row, fmt.Sprintf("%s; %.1f s", peer(name), s.peersWatchCPU[name]))
		}
		mem = append(mem, row)
		baselineSynced := "—"
		if s.baselineSynced > 0 {
			baselineSynced = secs(s.baselineSynced)
		}
		load = append(load, []string{podsLabel(s.pods), s.build.Round(time.Second).String(), s.load, fmt.Sprintf("%.1f s / %.1f s", s.watchCPU, s.startCPU),
			secs(s.synced), secs(s.firstAttach), baselineSynced, s.quiet.String(), fmt.Sprintf("%d / %d", s.lists, s.watches),
			fmt.Sprintf("%.2f / %.2f", s.storm.p50, s.storm.p99), fmt.Sprintf("%.2f / %.2f", s.webhook.webhook.p50, s.webhook.webhook.p99), fmt.Sprintf("%.2f / %.2f", s.webhook.policy.p50, s.webhook.policy.p99),
			mibOrDash(s.apiserver), mibOrDash(s.etcd), s.stepTime.Round(time.Second).String()})
	}
	return [][][]string{mem, load}
}

func writeMarkdown(w io.Writer, table [][]string) {
	for i, r := range table {
		fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
		if i == 0 {
			fmt.Fprintln(w, "|"+strings.Repeat(" --- |", len(r)))
		}
	}
}

func printScaleTable(w io.Writer, steps []scaleStep, baseline int64) {
	for _, t := range scaleTables(steps, baseline) {
		fmt.Fprintln(w)
		writeMarkdown(w, t)
	}
}

// writeScaleReport writes scale.md and scale-rss.svg into dir.
func writeScaleReport(dir, commit string, steps []scaleStep, baseline int64, stopReason string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	empty := "our controller empty-cluster baseline " + mib(baseline)
	if baseline < 0 {
		empty = "resumed on a cluster an earlier run built (-scale-resume): no empty-cluster baseline, and \"through the watch\" is ours started at the size it resumed at"
	}
	fmt.Fprintf(&b, "Written by `go run ./test/bench scale` at commit `%s` on %s (%d cores). Peak RSS (VmHWM); %s.\n",
		commit, time.Now().Format("2006-01-02"), numCPU(), empty)
	if stopReason != "" {
		fmt.Fprintf(&b, "\nStopped before the next step: %s.\n", stopReason)
	}
	for _, t := range scaleTables(steps, baseline) {
		b.WriteString("\n")
		writeMarkdown(&b, t)
	}
	if err := os.WriteFile(filepath.Join(dir, scaleTableFile), []byte(b.String()), 0o644); err != nil {
		return err
	}
	svg := filepath.Join(dir, scaleSVGFile)
	if err := plotRSS(svg, steps); err != nil {
		return fmt.Errorf("writing %s: %w", svg, err)
	}
	fmt.Printf("\nwrote %s and %s\n", filepath.Join(dir, scaleTableFile), svg)
	return nil
}

// plotRSS draws peak RSS against Pods, both on log scales, one line per process.
func plotRSS(path string, steps []scaleStep) error {
	p := plot.New()
	p.Title.Text = "Peak RSS against Pods (one cluster, side by side)"
	p.X.Label.Text = "Pods"
	p.Y.Label.Text = "peak RSS (MiB)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	type rssSeries struct {
		name string
		rss  func(scaleStep) int64
	}
	series := []rssSeries{
		{"configmap-attacher (started anew)", func(s scaleStep) int64 { return s.startRSS }},
		{"configmap-attacher (through the watch)", func(s scaleStep) int64 { return s.watchRSS }},
		{"configmap-attacher with GOMEMLIMIT (started anew)", func(s scaleStep) int64 { return s.peersStart[limitedName] }},
		{"kube-controller-manager", func(s scaleStep) int64 { return s.kcm }},
		{"configmap-rs-operator (started anew)", func(s scaleStep) int64 { return s.peersStart[rsOperator] }},
		{"Reloader (started anew)", func(s scaleStep) int64 { return s.peersStart["reloader"] }},
		{"configmap-attacher baseline build (started anew)", func(s scaleStep) int64 { return s.peersStart[baselineName] }},
	}
	for _, name := range variantNames(steps) {
		series = append(series, rssSeries{name + " (through the watch)", func(s scaleStep) int64 { return s.peersWatch[name] }})
	}
	var args []any
	for _, sr := range series {
		var xys plotter.XYs
		for _, s := range steps {
			if v := sr.rss(s); v > 0 {
				xys = append(xys, plotter.XY{X: float64(s.pods), Y: float64(v) / (1 << 20)})
			}
		}
		if len(xys) > 0 {
			args = append(args, sr.name, xys)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// scalePlot redraws scale-rss.svg into dir from the scale.md files of runs that grew one cluster in
// turns (a run stopped by its memory check or budget, then -scale-resume): their memory tables'
// rows, by Pods, a later file's row winning.
func scalePlot(dir string, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("usage: bench scale-plot [-scale-out DIR] scale.md...: no file given")
	}
	byPods := map[int]scaleStep{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		steps, err := readScaleRSS(string(b))
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for _, s := range steps {
			byPods[s.pods] = s
		}
	}
	steps := make([]scaleStep, 0, len(byPods))
	for _, s := range byPods {
		steps = append(steps, s)
	}
	slices.SortFunc(steps, func(a, b scaleStep) int { return a.pods - b.pods })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	svg := filepath.Join(dir, scaleSVGFile)
	if err := plotRSS(svg, steps); err != nil {
		return fmt.Errorf("writing %s: %w", svg, err)
	}
	fmt.Printf("wrote %s: %d steps from %d files\n", svg, len(steps), len(files))
	return nil
}

// readScaleRSS reads back the memory table of a scale.md (scaleTables): each row's Pods and the peak
// RSS figures plotRSS draws. A cell it cannot read ("—") is 0, which plotRSS leaves out.
func readScaleRSS(text string) ([]scaleStep, error) {
	var cols map[string]int
	var steps []scaleStep
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| ") {
			if len(steps) > 0 {
				break // the memory table ended
			}
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		if cols == nil {
			if cells[0] == colPods && slices.Contains(cells, colWatch) {
				cols = map[string]int{}
				for i, c := range cells {
					cols[c] = i
				}
			}
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		cell := func(col string) string {
			if i, ok := cols[col]; ok && i < len(cells) {
				return cells[i]
			}
			return ""
		}
		pods, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSuffix(cell(colPods), " Pods"), ",", ""))
		if err != nil {
			return nil, fmt.Errorf("row %q: Pods: %w", line, err)
		}
		anew := func(col string) int64 { // "watch / anew": the second
			_, a, _ := strings.Cut(cell(col), " / ")
			return mibCell(a)
		}
		steps = append(steps, scaleStep{pods: pods, watchRSS: mibCell(cell(colWatch)), startRSS: mibCell(cell(colAnew)), kcm: mibCell(cell(colKCM)),
			peersStart: map[string]int64{limitedName: mibCell(cell(colLimited)), rsOperator: anew(colRSOperator), "reloader": anew(colReloader), baselineName: anew(colBaseline)}})
	}
	if cols == nil {
		return nil, fmt.Errorf("no memory table (a header with %q)", colWatch)
	}
	return steps, nil
}

// mibCell reads the first figure of a cell as mib writes it ("47.2 MiB", "39.4 MiB (limit 96.0
// MiB)"), in bytes; 0 for anything else.
func mibCell(c string) int64 {
	f := strings.Fields(c)
	if len(f) < 2 || f[1] != "MiB" {
		return 0
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(f[0], ",", ""), 64)
	if err != nil {
		return 0
	}
	return int64(v * (1 << 20))
}

func (q quietStart) String() string {
	if q.synced == 0 {
		return "—"
	}
	return fmt.Sprintf("%s, %s, %s, %s", q.load, secs(q.synced), secs(q.firstAttach), mib(q.rss))
}

// variantNames are the -scale-watch-variant processes the steps measured, in order.
func variantNames(steps []scaleStep) []string {
	var names []string
	for _, s := range steps {
		for name := range s.peersWatch {
			if isVariant(name) && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return names
}
