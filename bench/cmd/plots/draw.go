package main

import (
	"compress/gzip"
	"fmt"
	"image/color"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// palette: eight colours told apart in print and by most colour-blind readers
// (Okabe and Ito's, and black).
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{0, 158, 115, 255},   // green
	color.RGBA{204, 121, 167, 255}, // purple
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{86, 180, 233, 255},  // sky blue
	color.RGBA{0, 0, 0, 255},       // black
	color.RGBA{150, 150, 150, 255}, // grey
}

// styleLine colours the i-th series; the toolkit's own lines are drawn thicker
// and solid, the others thinner, some dashed.
func styleLine(l *plotter.Line, i int, name string) {
	l.Color = palette[i%len(palette)]
	l.Width = vg.Points(1.2)
	if strings.HasPrefix(name, "deadlinekit") {
		l.Width = vg.Points(2.6)
	} else if i%2 == 1 {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(2)}
	}
}

func xys(pts [][2]float64) plotter.XYs {
	out := make(plotter.XYs, len(pts))
	for i, p := range pts {
		out[i].X, out[i].Y = p[0], p[1]
	}
	return out
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.ThumbnailWidth = vg.Points(24)
	return p
}

// drawHedge draws, per variant, the share of calls at least as slow as each
// latency, on log-log axes.
func drawHedge(in, out, note string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	lat, order, err := readHedgeCSV(zr, "steady")
	if err != nil {
		return err
	}
	p := newPlot("Hedging: how many calls are slower than x\n"+note,
		"latency, ms (log)", "share of calls at least this slow (log)")
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	for i, v := range order {
		xs, ys := survival(lat[v])
		pts := make(plotter.XYs, len(xs))
		for j := range xs {
			pts[j].X, pts[j].Y = max(xs[j], 0.1), ys[j]
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		styleLine(l, i, v)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (%d calls)", v, len(lat[v])), l)
	}
	return p.Save(9*vg.Inch, 6*vg.Inch, out)
}

// drawGoodput draws goodput against offered load, one panel per handler mode.
func drawGoodput(in, out, note string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	d, err := readAdmission(f)
	if err != nil {
		return err
	}
	titles := map[int]string{1: "work stops when its context ends", 2: "work ignores its context"}
	row := make([]*plot.Plot, 0, 2)
	legend := plot.NewLegend()
	legend.Left, legend.Top = true, true
	legend.ThumbnailWidth = vg.Points(24)
	entries := 0
	for _, mode := range []int{1, 2} {
		series, order := goodputByLoad(d, mode)
		p := newPlot("Admission, "+titles[mode], "offered load, × capacity (800 requests/s)", "goodput, % of capacity")
		p.Y.Min, p.Y.Max = 0, 105
		ideal, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 100}, {X: 4, Y: 100}})
		if err != nil {
			return err
		}
		ideal.Color, ideal.Dashes = color.Gray{Y: 190}, []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(ideal)
		for i, v := range order {
			l, s, err := plotter.NewLinePoints(xys(series[v]))
			if err != nil {
				return err
			}
			styleLine(l, i, v)
			s.Color, s.Shape = l.Color, draw.CircleGlyph{}
			p.Add(l, s)
			if mode == 1 {
				legend.Add(v, l, s)
				entries++
			}
		}
		row = append(row, p)
	}
	return saveTiles([][]*plot.Plot{row}, &legend, entries, "goodput against offered load, each variant's least stalled round (scheduling p99.9); "+note, 15*vg.Inch, 7.5*vg.Inch, out)
}

// drawKnee draws the requests in the handler (100 ms means) of each variant
// against the knee, in the cell whose knee moves.
func drawKnee(in, out, note string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	d, err := readAdmission(f)
	if err != nil {
		return err
	}
	var c *admissionCell
	for i := range d.Cells {
		if d.Cells[i].Config.Shape.KneeAfter > 0 {
			c = &d.Cells[i]
		}
	}
	if c == nil {
		return fmt.Errorf("%s: no cell whose knee moves", in)
	}
	p := newPlot("Following a moving knee: "+c.Name+"; of each variant's rounds, the one least stalled (scheduling p99.9)\n"+note,
		"time into the measured part, s", "requests in the handler (100 ms means)")
	p.Legend.Top = true
	knee, err := plotter.NewLine(xys(kneeLine(*c)))
	if err != nil {
		return err
	}
	knee.Color, knee.Width = color.Gray{Y: 120}, vg.Points(6)
	p.Add(knee)
	p.Legend.Add("the backend's knee", knee)
	for i, r := range c.Results {
		k := calmest(r.Rounds)
		if k < 0 {
			continue
		}
		l, err := plotter.NewLine(xys(means(r.Rounds[k].InHandler, 10)))
		if err != nil {
			return err
		}
		styleLine(l, i, r.Variant)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (goodput %.0f%%; median of %d rounds %.0f%%)", r.Variant,
			100*r.Rounds[k].Goodput/d.Capacity, len(r.Rounds), 100*r.Med.Goodput/d.Capacity), l)
	}
	p.Y.Min = 0
	top := 0.0
	for _, r := range c.Results {
		for _, rd := range r.Rounds {
			for _, v := range rd.InHandler {
				top = max(top, float64(v))
			}
		}
	}
	p.Y.Max = 1.5 * max(top, float64(c.Config.Shape.Knee))
	var ticks plot.ConstantTicks
	for v := 0.0; v <= p.Y.Max; v += 4 {
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprint(v)})
	}
	p.Y.Tick.Marker = ticks
	return p.Save(10*vg.Inch, 6*vg.Inch, out)
}

// saveTiles draws plots side by side under a caption, their legend beneath them,
// and writes a PNG.
func saveTiles(plots [][]*plot.Plot, legend *plot.Legend, entries int, caption string, w, h vg.Length, out string) error {
	img := vgimg.New(w, h)
	dc := draw.New(img)
	head := plot.New()
	head.Title.Text = caption
	head.HideAxes()
	head.Draw(dc)
	strip := vg.Points(16) * vg.Length(entries+1)
	legend.Draw(draw.Crop(dc, vg.Points(60), 0, vg.Points(4), strip-h))
	t := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadX: vg.Points(12), PadTop: vg.Points(28), PadBottom: strip, PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(plots, t, dc)
	for j := range plots {
		for i := range plots[j] {
			plots[j][i].Draw(canvases[j][i])
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
