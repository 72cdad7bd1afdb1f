package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// plotBin is the width of the time bins of the goodput and p99 panels.
const plotBin = 250 * time.Millisecond

// point is one point of a line: x in seconds.
type point struct{ x, y float64 }

// line is one variant's line in a panel; a NaN y breaks it.
type line struct {
	name   string
	color  string
	dashed bool
	points []point
}

// panel is one chart of the plot, sharing the x axis of the others.
type panel struct {
	title string
	ymax  float64
	lines []line
}

var palette = []string{"#d62728", "#ff7f0e", "#2ca02c", "#1f77b4", "#9467bd", "#8c564b", "#e377c2"}

// panels makes the plot's panels from the runs: each variant's goodput,
// its limit of a key, and its admitted requests' p99, over time.
func panels(c config, runs []variantRun) []panel {
	good := panel{title: "goodput (requests a second answered 200 in time)", ymax: c.capacityBefore() * 1.25}
	limit := panel{title: "limit (requests in flight): the heavy tenant's, and dashed all tenants' together"}
	p99 := panel{title: "p99 latency of admitted requests (ms, capped at the client's timeout)", ymax: float64(c.timeout) / float64(time.Millisecond)}
	bins := int((c.duration + plotBin - 1) / plotBin)
	capLine := line{name: "capacity", color: "#555555", dashed: true}
	for b := range bins {
		at := time.Duration(b) * plotBin
		cp := c.capacityBefore()
		if at >= c.drop() {
			cp = c.capacityAfter()
		}
		capLine.points = append(capLine.points, point{at.Seconds(), cp}, point{(at + plotBin).Seconds(), cp})
	}
	good.lines = append(good.lines, capLine)
	workers := line{name: "server's workers", color: "#555555", dashed: true,
		points: []point{{0, float64(c.workers)}, {c.drop().Seconds(), float64(c.workers)}, {c.drop().Seconds(), float64(c.workersAfter)}, {c.duration.Seconds(), float64(c.workersAfter)}}}
	limit.lines = append(limit.lines, workers)
	limit.ymax = float64(c.workers) * 2.5
	for i, run := range runs {
		color := palette[i%len(palette)]
		done := make([]int, bins)
		lat := make([][]time.Duration, bins)
		for _, r := range run.records {
			if r.outcome == ok {
				if b := int((r.at + r.latency) / plotBin); b < bins {
					done[b]++
				}
			}
			if r.outcome == ok || r.outcome == timedOut {
				b := int(r.at / plotBin)
				lat[b] = append(lat[b], r.latency)
			}
		}
		gl := line{name: run.name, color: color}
		pl := line{name: run.name, color: color}
		for b := range bins {
			x := (time.Duration(b)*plotBin + plotBin/2).Seconds()
			gl.points = append(gl.points, point{x, float64(done[b]) / plotBin.Seconds()})
			y := math.NaN()
			if len(lat[b]) > 0 {
				y = float64(percentile(lat[b], 99)) / float64(time.Millisecond)
			}
			pl.points = append(pl.points, point{x, y})
		}
		good.lines = append(good.lines, gl)
		p99.lines = append(p99.lines, pl)
		ll := line{name: run.name + ": t0", color: color}
		ol := line{name: run.name + ": all", color: color, dashed: true}
		for _, s := range run.limits {
			if s.at > c.duration { // sampled while the last answers came
				break
			}
			ll.points = append(ll.points, point{s.at.Seconds(), s.key})
			ol.points = append(ol.points, point{s.at.Seconds(), s.overall})
			for _, v := range []float64{s.key, s.overall} {
				if v*1.1 > limit.ymax { // false for NaN
					limit.ymax = v * 1.1
				}
			}
		}
		limit.lines = append(limit.lines, ll)
		if slices.ContainsFunc(ol.points, func(p point) bool { return !math.IsNaN(p.y) }) {
			limit.lines = append(limit.lines, ol)
		}
	}
	return []panel{good, limit, p99}
}

// writeSVG draws the panels one above the other, time in seconds along
// x from 0 to xmax, each with its own y axis from 0 to its ymax (values
// above it are drawn at it), and a legend of the variants.
func writeSVG(w io.Writer, title string, xmax float64, ps []panel) error {
	const (
		width, left, right = 960.0, 70.0, 190.0
		top, panelH, gapH  = 40.0, 200.0, 50.0
	)
	height := top + float64(len(ps))*(panelH+gapH)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="15">%s</text>`+"\n", left, escape(title))
	plotW := width - left - right
	for i, p := range ps {
		y0 := top + float64(i)*(panelH+gapH) + 20
		sx := func(x float64) float64 { return left + x/xmax*plotW }
		sy := func(y float64) float64 { return y0 + panelH - math.Min(y, p.ymax)/p.ymax*panelH }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", left, y0-6, escape(p.title))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panelH)
		for _, t := range ticks(p.ymax) {
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
				left, left+plotW, sy(t), sy(t), left-5, sy(t)+4, label(t))
		}
		for _, t := range ticks(xmax) {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s s</text>`+"\n", sx(t), y0+panelH+15, label(t))
		}
		legend := 0
		for _, l := range p.lines {
			dash := ""
			if l.dashed {
				dash = ` stroke-dasharray="5,4"`
			}
			var d strings.Builder
			pen := false
			for _, pt := range l.points {
				if math.IsNaN(pt.y) {
					pen = false
					continue
				}
				cmd := "L"
				if !pen {
					cmd = "M"
				}
				fmt.Fprintf(&d, "%s%.1f,%.1f ", cmd, sx(pt.x), sy(pt.y))
				pen = true
			}
			if d.Len() == 0 {
				continue // nothing to draw, nothing to name
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"%s/>`+"\n", strings.TrimSpace(d.String()), l.color, dash)
			ly := y0 + 12 + float64(legend)*16
			legend++
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="2"%s/><text x="%.0f" y="%.0f">%s</text>`+"\n",
				left+plotW+10, left+plotW+30, ly, ly, l.color, dash, left+plotW+35, ly+4, escape(l.name))
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// ticks returns about five round values from 0 to max.
func ticks(max float64) []float64 {
	if max <= 0 {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10(max/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if max/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var out []float64
	for t := 0.0; t <= max+step/1e6; t += step {
		out = append(out, t)
	}
	return out
}

func label(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", math.Round(v*100)/100)
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// writeCSV writes the plot's series, a row per variant and time bin:
// goodput a second, the p99 of the admitted requests sent in the bin in ms,
// and the limits sampled last in the bin (empty where there are none).
func writeCSV(w io.Writer, c config, runs []variantRun) error {
	ps := panels(c, runs)
	good, p99 := ps[0].lines[1:], ps[2].lines
	var b strings.Builder
	b.WriteString("variant,t_s,goodput_per_s,p99_ms,limit_t0,limit_t1,limit_all\n")
	for i, run := range runs {
		for k, g := range good[i].points {
			from, to := time.Duration(k)*plotBin, time.Duration(k+1)*plotBin
			lim := noLimit()
			for _, s := range run.limits {
				if s.at >= from && s.at < to {
					lim = s.limits
				}
			}
			fmt.Fprintf(&b, "%s,%.2f,%.0f,%s,%s,%s,%s\n", run.name, from.Seconds(), g.y, num(p99[i].points[k].y), num(lim.key), num(lim.small), num(lim.overall))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return fmt.Sprintf("%.1f", v)
}
