package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Chart geometry, in SVG user units (pixels at 100%).
const (
	chartWidth  = 860
	chartLeft   = 56  // room for the y-axis labels
	chartRight  = 16  //
	chartTop    = 64  // room for the title
	panelHeight = 124 // one algorithm: label, plot and a gap
	panelLabel  = 22  // the label above each plot
	chartBottom = 40  // room for the x-axis label
)

// Colours: one per kind of algorithm (Maglev, ring, bounded loads), and the reference line.
const (
	maglevColor = "#2f6db5"
	ringColor   = "#e07b28"
	boundColor  = "#2a9d5c"
	refColor    = "#222"
	gridColor   = "#ddd"
	textColor   = "#222"
	mutedColor  = "#666"
)

// chart returns an SVG document with one bar chart per row of r: every
// backend's load over its fair share, in backend order, on a shared scale
// with a dashed line at 1, the perfect share.
func chart(r *report) string {
	plotW := float64(chartWidth - chartLeft - chartRight)
	plotH := float64(panelHeight - panelLabel - 18)
	height := chartTop + panelHeight*len(r.Rows) + chartBottom

	top := 1.5 // y-axis maximum: a multiple of 0.5 above every load
	for _, res := range r.Rows {
		for _, l := range res.loads {
			if !math.IsNaN(l) {
				top = max(top, math.Ceil(l/0.5)*0.5)
			}
		}
	}
	y := func(panel int, v float64) float64 {
		base := float64(chartTop + panel*panelHeight + panelLabel)
		return base + plotH*(1-v/top)
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", chartWidth, height)
	title := "Keys per backend over its fair share: " + describe(r)
	text(&b, chartLeft, 24, "start", 15, "bold", textColor, title)
	text(&b, chartLeft, 44, "start", 12, "normal", mutedColor,
		fmt.Sprintf("1 is a perfect share (dashed). Sampling noise alone gives sd ≈ √(N/K) = %.3f.", r.NoiseFloor))

	for p, res := range r.Rows {
		color := maglevColor
		switch res.Algorithm {
		case "ring":
			color = ringColor
		case "bounded":
			color = boundColor
		}
		labelY := float64(chartTop + p*panelHeight + panelLabel - 7)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="%s"><tspan font-weight="bold">%s</tspan><tspan dx="12" fill="%s">max %.3f</tspan><tspan dx="10" fill="%s">min %.3f</tspan><tspan dx="10" fill="%s">sd %.3f</tspan></text>`+"\n",
			chartLeft, labelY, textColor, html.EscapeString(res.Name), mutedColor, res.LoadMax, mutedColor, res.LoadMin, mutedColor, res.LoadStddev)

		// Grid lines every 0.5, labelled at whole numbers.
		for v := 0.0; v <= top+1e-9; v += 0.5 {
			yy := y(p, v)
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`+"\n",
				chartLeft, chartWidth-chartRight, yy, yy, gridColor)
			if v == math.Trunc(v) {
				text(&b, chartLeft-6, yy+4, "end", 11, "normal", mutedColor, fmt.Sprintf("%.0f", v))
			}
		}

		// One bar per backend.
		slot := plotW / float64(len(res.loads))
		barW := slot
		if slot >= 3 {
			barW = slot * 0.75
		}
		fmt.Fprintf(&b, `<g fill="%s">`+"\n", color)
		for i, l := range res.loads {
			if math.IsNaN(l) {
				continue
			}
			x := float64(chartLeft) + float64(i)*slot + (slot-barW)/2
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f"/>`+"\n",
				x, y(p, l), barW, y(p, 0)-y(p, l))
		}
		b.WriteString("</g>\n")

		// The perfect share.
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2" stroke-dasharray="5 4"/>`+"\n",
			chartLeft, chartWidth-chartRight, y(p, 1), y(p, 1), refColor)
	}
	text(&b, chartLeft+plotW/2, float64(height-14), "middle", 12, "normal", mutedColor,
		fmt.Sprintf("backends %s to %s, in that order", r.names[0], r.names[len(r.names)-1]))
	b.WriteString("</svg>\n")
	return b.String()
}

// text writes an SVG text element.
func text(b *strings.Builder, x, y float64, anchor string, size int, weight, color, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%d" font-weight="%s" fill="%s">%s</text>`+"\n",
		x, y, anchor, size, weight, color, html.EscapeString(s))
}
