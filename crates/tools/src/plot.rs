//! PNG charts for `mojim bench --matrix`: lines over a discrete x axis and labelled bars, with
//! linear or logarithmic axes, drawn with `plotters` and an embedded font (a subset of DejaVu
//! Sans, `assets/LICENSE-DejaVu.txt`), so that no system font is needed.
//!
//! Every axis is linear to `plotters`: a logarithmic axis is drawn by plotting `log10` of the
//! values with tick marks at chosen values, which keeps one chart type for every combination.

use mojim::error::{Error, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;
use std::sync::Once;

/// DejaVu Sans cut down to printable ASCII and a few symbols (21 KB).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");
const FAMILY: &str = "sans-serif";
/// Pixels of every chart.
const SIZE: (u32, u32) = (1100, 650);
/// Distinct colours (Tableau 10), picked in order.
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// One axis: its description (with the unit), whether it is logarithmic, and how to print a
/// value at a tick mark.
pub struct Axis {
    pub desc: String,
    pub log: bool,
    pub format: fn(f64) -> String,
}

impl Axis {
    pub fn linear(desc: &str) -> Axis {
        Axis { desc: desc.into(), log: false, format: number }
    }

    pub fn log(desc: &str) -> Axis {
        Axis { desc: desc.into(), log: true, format: number }
    }

    pub fn with_format(mut self, format: fn(f64) -> String) -> Axis {
        self.format = format;
        self
    }

    fn plotted(&self, v: f64) -> f64 {
        if self.log {
            v.max(1e-12).log10()
        } else {
            v
        }
    }

    fn unplotted(&self, v: f64) -> f64 {
        if self.log {
            10f64.powf(v)
        } else {
            v
        }
    }
}

/// A line of points `(x, y)` in data units.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Index into the colour list.
    pub color: usize,
    pub dashed: bool,
}

/// Where the legend goes.
pub use plotters::chart::SeriesLabelPosition as Legend;

/// A number as a tick label: no trailing zeros, thousands as `K`.
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 && (v / 1000.0).fract().abs() < 1e-9 {
        format!("{}K", (v / 1000.0).round())
    } else if a >= 100.0 || (v.fract().abs() < 1e-9) {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.1}"))
    } else if a >= 0.1 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A byte count as a tick label (`8 B`, `4 KiB`).
pub fn bytes(v: f64) -> String {
    let b = v.round() as u64;
    if b >= 1024 && b.is_multiple_of(1024) {
        format!("{} KiB", b / 1024)
    } else {
        format!("{b} B")
    }
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let registered = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
        assert!(registered.is_ok(), "the embedded font is valid TrueType");
    });
}

fn draw_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Io { op: format!("draw {what}"), source: std::io::Error::other(e.to_string()) }
}

/// A linear axis over `[lo, hi]` with tick marks exactly at `ticks` (plotters' own
/// `with_key_points` loses the default label formatting of `f64`).
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let frac = (v - self.lo) / (self.hi - self.lo);
        limit.0 + ((limit.1 - limit.0) as f64 * frac + 1e-3).floor() as i32
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// Tick marks of a value axis over `[lo, hi]` (data units).
fn ticks(axis: &Axis, lo: f64, hi: f64) -> Vec<f64> {
    if axis.log {
        let mut out = Vec::new();
        for steps in [&[1.0][..], &[1.0, 3.0], &[1.0, 2.0, 5.0]] {
            out.clear();
            let mut decade = 10f64.powf(lo.log10().floor());
            while decade <= hi * 1.0001 {
                out.extend(
                    steps.iter().map(|s| s * decade).filter(|&v| v >= lo * 0.9999 && v <= hi * 1.0001),
                );
                decade *= 10.0;
            }
            if out.len() >= 4 {
                break;
            }
        }
        // Label the bottom of the axis too (it is a round value: see `value_range`).
        if out.first().is_none_or(|&f| f > lo * 1.0001) {
            out.insert(0, lo);
        }
        out
    } else {
        let span = (hi - lo).max(1e-12);
        let raw = span / 6.0;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|&s| span / s <= 8.0)
            .unwrap_or(mag * 10.0);
        let mut v = (lo / step).ceil() * step;
        let mut out = Vec::new();
        while v <= hi + step * 1e-9 {
            out.push(v);
            v += step;
        }
        out
    }
}

/// The range a value axis shows for values in `[min, max]`, with the top `room` of the
/// height (a fraction) left free for a legend or labels above the bars.
fn value_range(axis: &Axis, min: f64, max: f64, room: f64) -> (f64, f64) {
    let keep = 1.0 - room.clamp(0.05, 0.6);
    if axis.log {
        let min = if min > 0.0 { min } else { max.max(1e-3) / 1000.0 };
        let max = max.max(min * 10.0);
        let lo = nice(min / 1.5, false);
        let hi = 10f64.powf(lo.log10() + (max.log10() - lo.log10()) / keep);
        (lo, nice(hi, true))
    } else {
        (0.0f64.min(min), if max > 0.0 { max / keep } else { 1.0 })
    }
}

/// The fraction of a chart's plotting area that a legend of `rows` entries takes.
fn legend_room(rows: usize) -> f64 {
    (rows as f64 * 20.0 + 40.0) / (SIZE.1 as f64 - 150.0)
}

/// The nearest 1, 2 or 5 × 10^k at or above (`up`) or at or below `v` (> 0).
fn nice(v: f64, up: bool) -> f64 {
    let decade = 10f64.powf(v.log10().floor());
    let steps = [1.0, 2.0, 5.0, 10.0].map(|s| s * decade);
    if up {
        steps.into_iter().find(|&s| s >= v * 0.9999).unwrap_or(10.0 * decade)
    } else {
        steps.into_iter().rev().find(|&s| s <= v * 1.0001).unwrap_or(decade)
    }
}

fn finite_min_max(vs: impl Iterator<Item = f64>) -> (f64, f64) {
    vs.filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// Draws lines over a discrete x axis (a tick at every distinct x) into the PNG at `path`;
/// `hline` adds a dashed grey reference line at that y, labelled.
pub fn lines(
    path: &Path,
    title: &str,
    x: &Axis,
    y: &Axis,
    series: &[Series],
    legend: Legend,
    hline: Option<(f64, &str)>,
) -> Result<()> {
    register_font();
    let what = path.display().to_string();
    let err = |e: &dyn std::fmt::Display| draw_error(&what, e);
    let mut xs: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    if xs.is_empty() {
        return Err(err(&"no points to plot"));
    }
    let (ymin, ymax) =
        finite_min_max(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(hline.map(|h| h.0)));
    let rows = series.len() + usize::from(hline.is_some());
    let (ylo, yhi) = value_range(y, ymin, ymax, legend_room(rows));
    let (x0, x1) = (x.plotted(xs[0]), x.plotted(xs[xs.len() - 1]));
    let pad = ((x1 - x0) * 0.04).max(0.3);
    let xticks: Vec<f64> = xs.iter().map(|&v| x.plotted(v)).collect();
    let yticks: Vec<f64> = ticks(y, ylo, yhi).into_iter().map(|v| y.plotted(v)).collect();

    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 26))
        .margin(18)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d(
            Ticked { lo: x0 - pad, hi: x1 + pad, ticks: xticks },
            Ticked { lo: y.plotted(ylo), hi: y.plotted(yhi), ticks: yticks },
        )
        .map_err(|e| err(&e))?;
    let xf = |v: &f64| (x.format)(x.unplotted(*v));
    let yf = |v: &f64| (y.format)(y.unplotted(*v));
    chart
        .configure_mesh()
        .x_desc(x.desc.as_str())
        .y_desc(y.desc.as_str())
        .axis_desc_style((FAMILY, 19))
        .label_style((FAMILY, 16))
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()
        .map_err(|e| err(&e))?;
    if let Some((v, label)) = hline {
        let v = y.plotted(v);
        let style = RGBColor(90, 90, 90).stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new(vec![(x0 - pad, v), (x1 + pad, v)], 10, 6, style))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(px, py)| PathElement::new(vec![(px, py), (px + 28, py)], style));
    }
    for s in series {
        let color = COLORS[s.color % COLORS.len()];
        let style = color.stroke_width(if s.dashed { 2 } else { 3 });
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| p.1.is_finite() && (!y.log || p.1 > 0.0))
            .map(|&(a, b)| (x.plotted(a), y.plotted(b)))
            .collect();
        let anno = if s.dashed {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 10, 6, style)).map_err(|e| err(&e))?
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style)).map_err(|e| err(&e))?
        };
        let marker = if s.dashed { color.stroke_width(2) } else { color.filled() };
        let dashed = s.dashed;
        anno.label(s.label.as_str()).legend(move |(px, py)| {
            // A dash, or a line, with the series' marker in the middle.
            let line = if dashed { [(0, 9), (19, 28)] } else { [(0, 14), (14, 28)] };
            EmptyElement::at((px, py))
                + PathElement::new(vec![(line[0].0, 0), (line[0].1, 0)], style)
                + PathElement::new(vec![(line[1].0, 0), (line[1].1, 0)], style)
                + Circle::new((14, 0), 4, marker)
        });
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, marker))).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .label_font((FAMILY, 16))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .margin(12)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws one labelled bar per `(name, value)`, with the value printed on top, into the PNG at
/// `path`.
pub fn bars(path: &Path, title: &str, y: &Axis, bars: &[(String, f64)], unit: &str) -> Result<()> {
    register_font();
    let what = path.display().to_string();
    let err = |e: &dyn std::fmt::Display| draw_error(&what, e);
    if bars.is_empty() {
        return Err(err(&"no bars to plot"));
    }
    let (ymin, ymax) = finite_min_max(bars.iter().map(|b| b.1));
    let (ylo, yhi) = value_range(y, ymin, ymax, 0.1);
    let n = bars.len();
    let yticks: Vec<f64> = ticks(y, ylo, yhi).into_iter().map(|v| y.plotted(v)).collect();
    // Wide enough that every bar's name fits under it.
    let width = SIZE.0.max(140 * n as u32 + 120);
    let root = BitMapBackend::new(path, (width, SIZE.1)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 26))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(
            Ticked { lo: -0.5, hi: n as f64 - 0.5, ticks: (0..n).map(|i| i as f64).collect() },
            Ticked { lo: y.plotted(ylo), hi: y.plotted(yhi), ticks: yticks },
        )
        .map_err(|e| err(&e))?;
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let xf = |v: &f64| names.get(v.round().max(0.0) as usize).cloned().unwrap_or_default();
    let yf = |v: &f64| (y.format)(y.unplotted(*v));
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y.desc.as_str())
        .axis_desc_style((FAMILY, 19))
        .label_style((FAMILY, 15))
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()
        .map_err(|e| err(&e))?;
    let base = y.plotted(ylo);
    let top_style = TextStyle::from((FAMILY, 15).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (i, (_, v)) in bars.iter().enumerate() {
        if !v.is_finite() || (y.log && *v <= 0.0) {
            continue;
        }
        let (c, top) = (i as f64, y.plotted(*v));
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(std::iter::once(Rectangle::new([(c - 0.36, base), (c + 0.36, top)], color.filled())))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{}{unit}", number(*v)),
                (c, top),
                top_style.clone(),
            )))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(number(10000.0), "10K");
        assert_eq!(number(1000.0), "1000");
        assert_eq!(number(150.0), "150");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(3.0), "3");
        assert_eq!(bytes(4096.0), "4 KiB");
        assert_eq!(bytes(256.0), "256 B");
    }

    #[test]
    fn log_ticks_cover_the_range_with_round_values() {
        let a = Axis::log("x");
        let t = ticks(&a, 1.0, 1000.0);
        assert_eq!(t, vec![1.0, 10.0, 100.0, 1000.0]);
        let t = ticks(&a, 1.0, 10.0);
        assert!(t.len() >= 3 && t.contains(&2.0), "{t:?}");
        assert_eq!((nice(130.0, true), nice(130.0, false), nice(0.6, false)), (200.0, 100.0, 0.5));
        let t = ticks(&Axis::linear("x"), 0.0, 13.0);
        assert_eq!(t.first(), Some(&0.0));
        assert!(t.len() >= 3 && t.len() <= 9, "{t:?}");
    }
}
