package scenario

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// partitionColours tell the partitions apart in the trace's picture.
var partitionColours = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// WriteTraceSVG draws a scaling run's trace: workers per partition over
// time above, ready depth per partition below. Lines of partitions that
// scale in step would hide each other, so each is drawn a hair off the
// next (by 0.1 worker).
func WriteTraceSVG(w io.Writer, rep ScalingReport, title string) error {
	const (
		width, height = 960, 600
		left, right   = 70, 150
		top1, h1      = 70, 280
		top2, h2      = 400, 150
	)
	plotW := float64(width - left - right)
	trace := rep.Trace
	if len(trace) == 0 {
		return fmt.Errorf("loadtest: no trace to draw")
	}
	span := trace[len(trace)-1].At.Seconds()
	if span <= 0 {
		span = 1
	}
	maxWorkers := rep.Config.Base * rep.Config.MaxFactor
	var maxReady int64 = 1
	for _, s := range trace {
		for _, r := range s.Ready {
			maxReady = max(maxReady, r)
		}
	}
	x := func(t time.Duration) float64 { return left + t.Seconds()/span*plotW }
	y1 := func(v float64) float64 { return top1 + h1 - v/float64(maxWorkers)*h1*0.95 }
	y2 := func(v float64) float64 { return top2 + h2 - v/float64(maxReady)*h2*0.95 }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	sub := fmt.Sprintf("%d jobs of %s over %d partitions, base %d, max %dx: done in %s (ideal %s, ratio %.2f; fixed %d workers: %s)",
		rep.Jobs, rep.Config.JobTime, rep.Config.Partitions, rep.Config.Base, rep.Config.MaxFactor, rep.Elapsed.Round(100*time.Millisecond),
		rep.Config.Ideal().Round(100*time.Millisecond), rep.Ratio(), rep.Config.Partitions*rep.Config.Base, rep.Config.Fixed())
	fmt.Fprintf(&b, `<text x="%d" y="44" fill="#444">%s</text>`+"\n", left, html.EscapeString(sub))

	// Axes, grid and ticks.
	for _, panel := range []struct {
		top, h int
		label  string
		ticks  []float64
		y      func(float64) float64
	}{
		{top1, h1, "workers per partition", workerTicks(maxWorkers), y1},
		{top2, h2, "ready jobs per partition", niceTicks(float64(maxReady), 4), y2},
	} {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="none" stroke="#999"/>`+"\n", left, panel.top, plotW, panel.h)
		for _, v := range panel.ticks {
			yy := panel.y(v)
			fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, left+plotW, yy, yy)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, yy, tickLabel(v))
		}
		fmt.Fprintf(&b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", panel.top+panel.h/2, panel.label)
	}
	for _, v := range niceTicks(span, 8) {
		xx := x(time.Duration(v * float64(time.Second)))
		for _, panel := range [][2]int{{top1, h1}, {top2, h2}} {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#e5e5e5"/>`+"\n", xx, xx, panel[0], panel[0]+panel[1])
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xx, top2+h2+16, tickLabel(v))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds from the worker's start</text>`+"\n", left+plotW/2, top2+h2+34)

	// The ideal and the actual end.
	for _, m := range []struct {
		at    time.Duration
		label string
	}{{rep.Config.Ideal(), "ideal"}, {rep.Elapsed, "done"}} {
		if m.at.Seconds() > span {
			continue
		}
		xx := x(m.at)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#555" stroke-dasharray="4 3"/>`+"\n", xx, xx, top1, top2+h2)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", xx, top1-6, m.label)
	}

	// One line per partition and panel: workers as steps, ready as a line.
	parts := rep.Config.Partitions
	for p := range parts {
		colour := partitionColours[p%len(partitionColours)]
		off := (float64(p) - float64(parts-1)/2) * 0.1
		var steps, ready strings.Builder
		for i, s := range trace {
			if p >= len(s.Workers) {
				continue
			}
			wy := y1(float64(s.Workers[p]) + off)
			ry := y2(float64(s.Ready[p]))
			if i == 0 {
				fmt.Fprintf(&steps, "M%.1f %.1f", x(s.At), wy)
				fmt.Fprintf(&ready, "M%.1f %.1f", x(s.At), ry)
				continue
			}
			fmt.Fprintf(&steps, " H%.1f V%.1f", x(s.At), wy)
			fmt.Fprintf(&ready, " L%.1f %.1f", x(s.At), ry)
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"/>`+"\n", steps.String(), colour)
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", ready.String(), colour)
		ly := top1 + 14 + p*18
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", left+plotW+14, left+plotW+34, ly, ly, colour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" dominant-baseline="middle">partition %d</text>`+"\n", left+plotW+40, ly, p)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// workerTicks are the powers of two from 1 up to max, and max.
func workerTicks(maxWorkers int) []float64 {
	out := []float64{0}
	for v := 1; v < maxWorkers; v *= 2 {
		out = append(out, float64(v))
	}
	return append(out, float64(maxWorkers))
}

// niceTicks are about n round values from 0 up to top.
func niceTicks(top float64, n int) []float64 {
	if top <= 0 {
		return []float64{0}
	}
	raw := top / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; v <= top*1.0001; v += step {
		out = append(out, v)
	}
	return out
}

func tickLabel(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%gk", v/1000)
	}
	return fmt.Sprintf("%g", v)
}
