package scenario

import (
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// WriteHTML writes the report as one self-contained page: the verdicts,
// each phase's numbers, and inline SVG charts (throughput, enqueue latency
// over time, queue depth and workers per partition, Redis memory). It
// loads nothing from anywhere when viewed.
func (r *Report) WriteHTML(w io.Writer) error {
	var b strings.Builder
	esc := html.EscapeString
	title := "sluice loadtest: " + r.Scenario
	if r.Size != "" {
		title += " (" + r.Size + ")"
	}
	fmt.Fprintf(&b, `<!doctype html>
<html><head><meta charset="utf-8"><title>%s</title>
<style>
body{font-family:sans-serif;margin:24px;max-width:1000px;color:#222}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}.pass{color:#1a7f37;font-weight:bold}.fail{color:#cf222e;font-weight:bold}
.note{color:#555}svg{display:block;margin:6px 0 18px}
</style></head><body>
`, esc(title))
	fmt.Fprintf(&b, "<h1>%s</h1>\n", esc(title))
	fmt.Fprintf(&b, `<p class="note">%s, %s; %d CPUs (%s), %d MB; load average %s at start; %s; took %.1f s. Gate %s, Redis %s.</p>`+"\n",
		esc(r.Started.Format("2006-01-02 15:04:05 MST")), esc(r.Machine.Host), r.Machine.CPUs, esc(r.Machine.CPUModel), r.Machine.MemoryMB,
		esc(r.Machine.Load1), esc(r.Machine.GoVersion), r.Elapsed, esc(r.Endpoints.Gate), esc(r.Endpoints.Redis))

	b.WriteString("<h2>Verdicts</h2>\n<table><tr><th class=l></th><th class=l>check</th><th class=l>measured</th><th class=l>target</th><th class=l>the seed's number</th></tr>\n")
	for _, v := range r.Verdicts {
		mark := `<span class="pass">PASS</span>`
		if !v.Pass {
			mark = `<span class="fail">FAIL</span>`
		}
		fmt.Fprintf(&b, "<tr><td class=l>%s</td><td class=l>%s</td><td class=l>%s</td><td class=l>%s</td><td class=l>%s</td></tr>\n",
			mark, esc(v.Name), esc(v.Got), esc(v.Want), esc(v.Seed))
	}
	b.WriteString("</table>\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "<p class=note>Note: %s</p>\n", esc(n))
	}
	if y := r.Yardsticks; y != nil {
		b.WriteString("<h2>Yardsticks (same run)</h2>\n<table>")
		fmt.Fprintf(&b, "<tr><td class=l>bare HTTP handler (this generator, single-job body)</td><td>%s req/s</td></tr>", thousands(int(y.BareHTTP)))
		fmt.Fprintf(&b, "<tr><td class=l>kfake produce (franz-go, in process)</td><td>%s records/s</td></tr>", thousands(int(y.KfakeProduce)))
		fmt.Fprintf(&b, "<tr><td class=l>redis-benchmark, 3-command EVALSHA, -P 16</td><td>%s calls/s</td></tr>", thousands(int(y.RedisEvalsha)))
		if f := y.ListFloor; f != nil {
			fmt.Fprintf(&b, "<tr><td class=l>the list floor in Redis, the contract's (envelopes on a list, a lease per batch)</td><td>%s jobs/s, %.1f µs of Redis CPU per job: at most %s jobs/s at one core</td></tr>",
				thousands(int(f.JobsPerSecond)), f.RedisMicrosPerJob, thousands(int(floorCeiling(f))))
		}
		if f := y.JobFloor; f != nil {
			fmt.Fprintf(&b, "<tr><td class=l>the keyed job floor in Redis, the old contract's (a key, a lease and a done record per job)</td><td>%s jobs/s, %.1f µs of Redis CPU per job: at most %s jobs/s at one core</td></tr>",
				thousands(int(f.JobsPerSecond)), f.RedisMicrosPerJob, thousands(int(floorCeiling(f))))
		}
		b.WriteString("</table>\n")
	}
	if len(r.Ratios) > 0 {
		b.WriteString("<h2>Ratios</h2>\n<table>")
		for _, k := range slices.Sorted(maps.Keys(r.Ratios)) {
			fmt.Fprintf(&b, "<tr><td class=l>%s</td><td>%.3f</td></tr>", esc(k), r.Ratios[k])
		}
		b.WriteString("</table>\n")
	}

	for _, ph := range r.Phases {
		fmt.Fprintf(&b, "<h2>Phase %s</h2>\n<p>%s jobs accepted in %.2f s (%s jobs/s)", esc(ph.Name), thousands(ph.Accepted), ph.SendSeconds, thousands(int(ph.EnqueueRate)))
		if ph.AllDone {
			fmt.Fprintf(&b, "; all done at %.2f s: <b>%s jobs/s end to end</b>", ph.DoneSeconds, thousands(int(ph.EndToEndRate)))
		}
		b.WriteString(".</p>\n")
		if c := ph.CPU; c != nil && c.TotalMicrosPerJob > 0 {
			fmt.Fprintf(&b, "<p>%s</p>\n", esc(c.describe()))
			if len(c.Parts) > 0 {
				b.WriteString("<table><tr><th class=l>process</th><th>CPU per job (µs)</th><th>share</th><th>cores busy</th><th>jobs/s at one core</th><th class=l></th></tr>\n")
				for _, p := range c.Parts {
					oneCore := ""
					if p.OneCoreJobsPerSecond > 0 {
						oneCore = thousands(int(p.OneCoreJobsPerSecond))
					}
					fmt.Fprintf(&b, "<tr><td class=l>%s</td><td>%.1f</td><td>%.0f%%</td><td>%.2f</td><td>%s</td><td class=l>%s</td></tr>\n",
						esc(p.Name), p.MicrosPerJob, p.Share*100, p.CoresBusy, oneCore, esc(strings.TrimSpace(p.note())))
				}
				b.WriteString("</table>\n")
			}
		}
		b.WriteString("<table><tr><th class=l>stream</th><th class=l>load</th><th>jobs</th><th class=l>latency (ms)</th><th>n</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>\n")
		for _, s := range ph.Streams {
			load := fmt.Sprintf("closed loop, %d conns, %d jobs/req, %s", s.Conns, s.Batch, s.JobType)
			if s.Mode == "open" {
				load = fmt.Sprintf("open loop %g req/s, %d jobs/req, %s", s.Rate, s.Batch, s.JobType)
			}
			rows := []struct {
				name string
				l    Latency
			}{{"enqueue", s.Enqueue}, {"enqueue-to-done", s.EnqueueToDone}}
			for i, row := range rows {
				if row.l.Count == 0 && i > 0 {
					continue
				}
				first := ""
				if i == 0 {
					first = fmt.Sprintf("<td class=l>%s</td><td class=l>%s</td><td>%s</td>", esc(s.Name), esc(load), thousands(s.JobsAccepted))
				} else {
					first = "<td></td><td></td><td></td>"
				}
				fmt.Fprintf(&b, "<tr>%s<td class=l>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
					first, row.name, thousands(int(row.l.Count)), fmtMS(row.l.P50), fmtMS(row.l.P90), fmtMS(row.l.P99), fmtMS(row.l.P999), fmtMS(row.l.Max))
			}
		}
		b.WriteString("</table>\n")
		if q := ph.EnqueueToStart; q.Count > 0 {
			fmt.Fprintf(&b, "<p>Enqueue-to-start (the worker's histogram, %s starts): p50 ~%.2f ms; %.1f%% under 1 ms, %.1f%% under 5 ms, %.1f%% under 10 ms.</p>\n",
				thousands(int(q.Count)), q.Quantile(.5)*1000, q.Under(.001)*100, q.Under(.005)*100, q.Under(.01)*100)
		}
		b.WriteString(phaseCharts(ph))
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// phaseCharts draws a phase's series.
func phaseCharts(ph PhaseResult) string {
	if len(ph.Series) == 0 {
		return ""
	}
	span := ph.Series[len(ph.Series)-1].T
	var b strings.Builder
	colours := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"}

	// Throughput: accepted per stream, done.
	var tp []chartLine
	for i, s := range ph.Streams {
		l := chartLine{name: s.Name + " accepted", colour: colours[i%len(colours)]}
		for _, smp := range ph.Series {
			if i < len(smp.Accepted) {
				l.pts = append(l.pts, [2]float64{smp.T, float64(smp.Accepted[i])})
			}
		}
		tp = append(tp, l)
	}
	done := chartLine{name: "done (Redis)", colour: "#222", dash: true}
	for _, smp := range ph.Series[1:] {
		done.pts = append(done.pts, [2]float64{smp.T, float64(smp.Done)})
	}
	tp = append(tp, done)
	b.WriteString(lineChart("Throughput", "jobs per second", span, tp, nil))

	// Enqueue latency over time.
	var lat []chartLine
	for i, s := range ph.Streams {
		p50 := chartLine{name: s.Name + " p50", colour: colours[i%len(colours)], dash: true}
		p99 := chartLine{name: s.Name + " p99", colour: colours[i%len(colours)]}
		for _, p := range s.Series {
			p50.pts = append(p50.pts, [2]float64{p.T, p.P50})
			p99.pts = append(p99.pts, [2]float64{p.T, p.P99})
		}
		lat = append(lat, p50, p99)
	}
	b.WriteString(lineChart("Enqueue latency, per second", "ms", span, lat, nil))

	// Queue depth and workers per partition.
	parts := 0
	for _, smp := range ph.Series {
		parts = max(parts, len(smp.Ready))
	}
	var ready, workers []chartLine
	for p := range parts {
		c := partitionColours[p%len(partitionColours)]
		rl := chartLine{name: fmt.Sprintf("p%d", p), colour: c}
		wl := chartLine{name: fmt.Sprintf("p%d", p), colour: c, step: true}
		off := (float64(p) - float64(parts-1)/2) * 0.05
		for _, smp := range ph.Series {
			if p < len(smp.Ready) && !math.IsNaN(smp.Ready[p]) {
				rl.pts = append(rl.pts, [2]float64{smp.T, smp.Ready[p]})
			}
			if p < len(smp.Workers) && !math.IsNaN(smp.Workers[p]) {
				wl.pts = append(wl.pts, [2]float64{smp.T, smp.Workers[p] + off})
			}
		}
		ready, workers = append(ready, rl), append(workers, wl)
	}
	b.WriteString(lineChart("Queue depth per partition (coordinator's view, each scaling cycle)", "ready jobs", span, ready, nil))
	b.WriteString(lineChart("Workers per partition (drawn a hair apart)", "workers", span, workers, nil))

	mem := chartLine{name: "used / maxmemory", colour: "#9467bd"}
	paused := chartLine{name: "relay guard paused", colour: "#d62728", step: true}
	for _, smp := range ph.Series {
		mem.pts = append(mem.pts, [2]float64{smp.T, smp.RedisMemory * 100})
		paused.pts = append(paused.pts, [2]float64{smp.T, math.Min(smp.GuardPaused, 1) * 100})
	}
	b.WriteString(lineChart("Redis memory (%)", "%", span, []chartLine{mem, paused}, []hline{{80, "guard: pause"}, {100, "maxmemory"}}))
	return b.String()
}

type chartLine struct {
	name, colour string
	pts          [][2]float64
	step, dash   bool
}

type hline struct {
	y     float64
	label string
}

// lineChart is an SVG chart of lines over [0, span] seconds.
func lineChart(title, yLabel string, span float64, lines []chartLine, hs []hline) string {
	const (
		width, height = 960, 240
		left, right   = 70, 170
		top, bottom   = 30, 36
	)
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	if span <= 0 {
		span = 1
	}
	top1 := 0.0
	for _, l := range lines {
		for _, p := range l.pts {
			if !math.IsNaN(p[1]) && !math.IsInf(p[1], 0) {
				top1 = math.Max(top1, p[1])
			}
		}
	}
	for _, h := range hs {
		top1 = math.Max(top1, h.y)
	}
	if top1 <= 0 {
		top1 = 1
	}
	top1 *= 1.05
	x := func(t float64) float64 { return left + t/span*plotW }
	y := func(v float64) float64 { return top + plotH - v/top1*plotH }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for _, v := range niceTicks(top1/1.05, 4) {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", left, left+plotW, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y(v), tickLabel(v))
	}
	for _, t := range niceTicks(span, 10) {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#eee"/>`+"\n", x(t), x(t), top, top+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(t), top+plotH+14, tickLabel(t))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", left, top, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">seconds from the phase's start</text>`+"\n", left+plotW/2, height-4)
	fmt.Fprintf(&b, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle" fill="#555">%s</text>`+"\n", top+plotH/2, top+plotH/2, html.EscapeString(yLabel))
	for _, h := range hs {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="5 4"/>`+"\n", left, left+plotW, y(h.y), y(h.y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#666">%s</text>`+"\n", left+4, y(h.y)-3, html.EscapeString(h.label))
	}
	for i, l := range lines {
		if len(l.pts) > 0 {
			var d strings.Builder
			for j, p := range l.pts {
				v := p[1]
				if math.IsNaN(v) || math.IsInf(v, 0) {
					continue
				}
				switch {
				case d.Len() == 0:
					fmt.Fprintf(&d, "M%.1f %.1f", x(p[0]), y(v))
				case l.step:
					fmt.Fprintf(&d, " H%.1f V%.1f", x(p[0]), y(v))
				default:
					fmt.Fprintf(&d, " L%.1f %.1f", x(p[0]), y(v))
				}
				_ = j
			}
			dash := ""
			if l.dash {
				dash = ` stroke-dasharray="5 3"`
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"%s/>`+"\n", d.String(), l.colour, dash)
		}
		ly := top + 8 + i*15
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", left+plotW+12, left+plotW+30, ly, ly, l.colour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" dominant-baseline="middle">%s</text>`+"\n", left+plotW+36, ly, html.EscapeString(l.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
