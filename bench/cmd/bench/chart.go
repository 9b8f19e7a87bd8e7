package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"slices"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

var palette = map[string]color.RGBA{
	"quorumlock":    {0x1f, 0x77, 0xb4, 0xff},
	"redsync":       {0xd6, 0x27, 0x28, 0xff},
	"raw":           {0x7f, 0x7f, 0x7f, 0xff},
	floorName:       {0x2c, 0xa0, 0x2c, 0xff},
	scriptFloorName: {0x98, 0xdf, 0x8a, 0xff},
}

// chart draws two panels of grouped bars, one group per scenario: throughput
// relative to redsync, and allocations per cycle. The floors (no lock)
// are left out.
func (rp *report) chart(path string) error {
	lockImpls := slices.DeleteFunc(slices.Clone(rp.impls), isFloor)
	rp = &report{passes: rp.passes, dur: rp.dur, scs: rp.scs, impls: lockImpls, meds: rp.meds, env: rp.env}
	if len(lockImpls) == 0 || len(rp.scs) == 0 {
		return nil
	}
	const w, h = 1100, 460
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, 10, 16, "quorumlock vs redsync vs raw go-redis: medians, 5 local Redis servers", color.Black)

	panel := func(title string, val func(sc scenario, im string) (float64, bool), label func(float64) string, left, width int) {
		top, bottom := 70, h-50
		text(img, left, 44, title, color.Black)
		maxV := 0.0
		for _, sc := range rp.scs {
			for _, im := range rp.impls {
				if v, ok := val(sc, im); ok {
					maxV = max(maxV, v)
				}
			}
		}
		if maxV == 0 {
			return
		}
		fill(img, image.Rect(left, bottom, left+width, bottom+1), color.Black)
		groupW := width / len(rp.scs)
		barW := (groupW - 12) / len(rp.impls)
		for g, sc := range rp.scs {
			gx := left + g*groupW + 6
			for k, im := range rp.impls {
				v, ok := val(sc, im)
				if !ok {
					continue
				}
				bh := int(float64(bottom-top) * v / maxV)
				x := gx + k*barW
				fill(img, image.Rect(x+2, bottom-bh, x+barW-2, bottom), palette[im])
				text(img, x, bottom-bh-4, label(v), color.Black)
			}
			text(img, gx+groupW/2-4*len(sc.id), bottom+16, sc.id, color.Black)
		}
	}
	rel := func(sc scenario, im string) (float64, bool) {
		r, ok1 := rp.get(sc.id, im)
		b, ok2 := rp.get(sc.id, base)
		if !ok1 || !ok2 || b.tput == 0 {
			return 0, false
		}
		return r.tput / b.tput, true
	}
	allocs := func(sc scenario, im string) (float64, bool) {
		r, ok := rp.get(sc.id, im)
		return r.allocs, ok && r.cycles > 0
	}
	panel("throughput / redsync's (higher is better)", rel, func(v float64) string { return fmt.Sprintf("%.2f", v) }, 20, 640)
	panel("allocations per cycle (lower is better)", allocs, func(v float64) string { return fmt.Sprintf("%.0f", v) }, 700, 380)
	for k, im := range rp.impls { // legend
		x := 20 + k*140
		fill(img, image.Rect(x, h-22, x+12, h-10), palette[im])
		text(img, x+16, h-11, im, color.Black)
	}
	text(img, 440, h-11, "w1/w16: 1/16 workers, own keys; try1: TryLock 1 key; block1: Lock 1 key; slow: w16, node0 +2ms", color.Black)
	return writePNG(img, path)
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func writePNG(img image.Image, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
