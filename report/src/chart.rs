//! Timeline charts: the data a chart shows ([`Chart`], built with the report's sections and
//! the comparison) and its self-contained SVG (no scripts, no network), which the HTML page
//! embeds. A chart is read at a glance: a time axis in seconds, y ticks at 1-2-5 steps with
//! their unit, each legend entry in its series' colour, phase boundaries at their real start,
//! limits (a CPU quota, the ephemeral-port range) as dashed lines, the driver's saturated
//! intervals shaded, a short last interval kept off the scale, and a series with no data
//! saying why instead of drawing a flat zero.

use std::fmt::Write as _;

/// Escapes text for XML and HTML content and attribute values (the charts' SVG, the
/// pages).
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// How a series' line is drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stroke {
    /// A measured series.
    #[default]
    Solid,
    /// A limit: a quota, the port range.
    Dashed,
    /// The run before, in a comparison: lighter and dashed, under the run after.
    Before,
}

/// One named line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// Its legend entry.
    pub name: String,
    /// (seconds since the start, value) points.
    pub points: Vec<(f64, f64)>,
    /// Index into the palette: series of one thing (a container's CPU and its quota, an op
    /// in both runs) share a colour.
    pub color: usize,
    /// How its line is drawn.
    pub stroke: Stroke,
    /// Why it has no points, when it has none.
    pub why_empty: Option<String>,
}

impl Series {
    /// A solid series in palette colour `color`.
    pub fn new(name: impl Into<String>, color: usize, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            color,
            stroke: Stroke::Solid,
            why_empty: None,
        }
    }

    /// Drawn as `stroke`.
    pub fn stroke(mut self, stroke: Stroke) -> Self {
        self.stroke = stroke;
        self
    }

    /// Says `why` when it has no points.
    pub fn or_why(mut self, why: impl Into<String>) -> Self {
        if self.points.is_empty() {
            self.why_empty = Some(why.into());
        }
        self
    }

    /// The series' colour.
    pub fn css_color(&self) -> &'static str {
        COLORS[self.color % COLORS.len()]
    }
}

/// A shaded stretch of time: an interval in which the driver was saturated.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    /// Start, seconds since the run started.
    pub start: f64,
    /// End.
    pub end: f64,
    /// What it marks (the tooltip): `driver saturated: CPU 187 % of 2 cores`.
    pub label: String,
}

/// One line chart over the run's time axis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chart {
    /// What it shows.
    pub title: String,
    /// The y axis's unit (`req/s`, `ms`, `cores`, `%`, `sockets`).
    pub unit: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Phase boundaries: (seconds since the start, the phase's name).
    pub marks: Vec<(f64, String)>,
    /// Shaded stretches (the driver's saturated intervals).
    pub bands: Vec<Band>,
    /// Time ranges whose points do not set the y scale (a run's last, partial interval: a
    /// rate over 0.18 s is noisy); a point of them above the scale is drawn at its top.
    pub off_scale: Vec<(f64, f64)>,
    /// The time axis's end, seconds (default: the last point).
    pub x_max: Option<f64>,
    /// Sentences under the chart (what is off the scale, why a series is empty).
    pub notes: Vec<String>,
    /// Why there is nothing to draw at all (then only the frame and this sentence).
    pub empty: Option<String>,
}

/// The palette, one colour per series index (colour-blind-friendly tableau order).
pub const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// A 1-2-5 step (× a power of ten) that cuts `0..max` into at most `target` parts.
pub fn nice_step(max: f64, target: usize) -> f64 {
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let f = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    f * mag
}

/// Ticks from 0 to the first multiple of a nice step at or above `max` (`0, 1` for nothing).
pub fn nice_ticks(max: f64, target: usize) -> Vec<f64> {
    let step = nice_step(max, target);
    let n = if max > 0.0 && max.is_finite() {
        // A hair of tolerance so 1000/250 is 4 steps, not 5.
        (max / step - 1e-9).ceil().max(1.0) as usize
    } else {
        1
    };
    (0..=n).map(|i| i as f64 * step).collect()
}

/// A tick's number with the decimals its step needs (`0.25`, `1500`).
fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{v:.decimals$}")
}

const W: f64 = 820.0;
const H: f64 = 240.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 190.0;
/// The width of one character of an 11 px legend, generously (sans-serif averages ~6 px).
const LEGEND_CHAR: f64 = 6.4;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 34.0;

/// A series' legend entry: its name, and `(no data)` or `(0 throughout)` when that is all
/// there is to see of it.
fn legend_name(se: &Series) -> String {
    if se.points.is_empty() {
        format!("{} (no data)", se.name)
    } else if se.points.iter().all(|p| p.1 == 0.0) {
        format!("{} (0 throughout)", se.name)
    } else {
        se.name.clone()
    }
}

impl Chart {
    /// A chart with these lines and nothing else yet.
    pub fn new(title: impl Into<String>, unit: impl Into<String>, series: Vec<Series>) -> Self {
        Self {
            title: title.into(),
            unit: unit.into(),
            series,
            ..Self::default()
        }
    }

    fn on_scale(&self, x: f64) -> bool {
        !self.off_scale.iter().any(|(a, b)| x >= *a && x <= *b)
    }

    /// The time axis's end: `x_max`, else the last point.
    pub fn x_end(&self) -> f64 {
        self.x_max.unwrap_or_else(|| {
            self.series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0))
                .chain(self.bands.iter().map(|b| b.end))
                .fold(1.0f64, f64::max)
        })
    }

    /// The y ticks: 0 up to the highest on-scale point, at a 1-2-5 step.
    pub fn y_ticks(&self) -> Vec<f64> {
        let max = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|(x, y)| self.on_scale(*x) && y.is_finite())
            .map(|p| p.1)
            .fold(0.0f64, f64::max);
        nice_ticks(max, 5)
    }

    /// The time ticks, seconds.
    pub fn x_ticks(&self) -> Vec<f64> {
        let end = self.x_end();
        nice_ticks(end, 8)
            .into_iter()
            .filter(|t| *t <= end + 1e-9)
            .collect()
    }

    /// The chart as an SVG figure (with its notes as a caption under it).
    pub fn svg(&self) -> String {
        let title = esc(&self.title);
        // The legend's column grows with its longest entry (a comparison's `game.evaluate
        // (run 12) (no data)`), so no name is cut at the edge; the plot keeps its width.
        let longest = self
            .series
            .iter()
            .map(|s| legend_name(s).chars().count())
            .max()
            .unwrap_or(0);
        let right = RIGHT.max(32.0 + LEGEND_CHAR * longest as f64);
        let w = W - RIGHT + right;
        let mut s = format!(
            "<figure><figcaption>{title}</figcaption><svg viewBox=\"0 0 {w} {H}\" width=\"{w}\" height=\"{H}\" role=img aria-label=\"{title}\">"
        );
        let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
        let _ = write!(
            s,
            "<rect x={x0} y={y1} width={} height={} class=frame />",
            x1 - x0,
            y0 - y1
        );
        if let Some(why) = &self.empty {
            let _ = write!(
                s,
                "<text x={} y={} text-anchor=middle class=empty>no data: {}</text></svg></figure>",
                (x0 + x1) / 2.0,
                (y0 + y1) / 2.0,
                esc(why)
            );
            return s;
        }
        let xmax = self.x_end();
        let yt = self.y_ticks();
        let ymax = *yt.last().unwrap_or(&1.0);
        let ystep = yt.get(1).copied().unwrap_or(1.0);
        let px = |x: f64| x0 + (x.clamp(0.0, xmax) / xmax) * (x1 - x0);
        let py = |y: f64| y0 - (y.clamp(0.0, ymax) / ymax) * (y0 - y1);

        for b in &self.bands {
            let _ = write!(
                s,
                "<rect x={:.1} y={y1} width={:.1} height={} class=band><title>{}</title></rect>",
                px(b.start),
                (px(b.end) - px(b.start)).max(1.0),
                y0 - y1,
                esc(&b.label)
            );
        }
        for t in &yt {
            let _ = write!(
                s,
                "<line x1={x0} y1={0:.1} x2={x1} y2={0:.1} class=grid /><text x={1} y={2:.1} class=tick text-anchor=end>{3}</text>",
                py(*t),
                x0 - 4.0,
                py(*t) + 4.0,
                tick_label(*t, ystep)
            );
        }
        let _ = write!(
            s,
            "<text x={} y={} class=unit text-anchor=end>{}</text>",
            x0 - 4.0,
            y1 - 10.0,
            esc(&self.unit)
        );
        let xt = self.x_ticks();
        let xstep = xt.get(1).copied().unwrap_or(1.0);
        for t in &xt {
            let _ = write!(
                s,
                "<line x1={0:.1} y1={y0} x2={0:.1} y2={1} class=axis /><text x={0:.1} y={2} class=tick text-anchor=middle>{3} s</text>",
                px(*t),
                y0 + 4.0,
                y0 + 16.0,
                tick_label(*t, xstep)
            );
        }
        let _ = write!(
            s,
            "<text x={} y={} class=unit text-anchor=end>time since the start</text>",
            x1,
            H - 4.0
        );
        for (i, (x, label)) in self.marks.iter().enumerate() {
            // Staggered, so the names of short phases do not overprint each other.
            let _ = write!(
                s,
                "<line x1={0:.1} y1={y1} x2={0:.1} y2={y0} class=phase /><text x={1:.1} y={2} class=mark>{3}</text>",
                px(*x),
                px(*x) + 3.0,
                y1 + 11.0 + 11.0 * (i % 2) as f64,
                esc(label)
            );
        }
        let mut entries: Vec<(String, Option<&Series>)> = Vec::new();
        for se in &self.series {
            let color = se.css_color();
            let dash = match se.stroke {
                Stroke::Solid => "",
                Stroke::Dashed => " stroke-dasharray=\"6 4\"",
                Stroke::Before => " stroke-dasharray=\"3 3\" stroke-opacity=0.6",
            };
            if se.points.len() == 1 {
                let (x, y) = se.points[0];
                let _ = write!(
                    s,
                    "<circle cx={:.1} cy={:.1} r=2.5 fill=\"{color}\" />",
                    px(x),
                    py(y)
                );
            } else if !se.points.is_empty() {
                let path: Vec<String> = se
                    .points
                    .iter()
                    .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                    .collect();
                let _ = write!(
                    s,
                    "<polyline fill=none stroke=\"{color}\" stroke-width=1.6{dash} points=\"{}\" />",
                    path.join(" ")
                );
            }
            // A point off the scale sits at its top, marked, with its value as a tooltip.
            for (x, y) in se
                .points
                .iter()
                .filter(|(x, y)| *y > ymax && !self.on_scale(*x))
            {
                let _ = write!(
                    s,
                    "<circle cx={:.1} cy={:.1} r=3 fill=white stroke=\"{color}\" class=off><title>{} at {x:.2} s: {} {} (off the scale)</title></circle>",
                    px(*x),
                    py(*y),
                    esc(&se.name),
                    tick_label(*y, ystep / 10.0),
                    esc(&self.unit)
                );
            }
            entries.push((legend_name(se), Some(se)));
        }
        if !self.bands.is_empty() {
            entries.push(("driver saturated".into(), None));
        }
        for (i, (name, se)) in entries.iter().enumerate() {
            let y = y1 + 6.0 + 15.0 * i as f64;
            let lx = x1 + 10.0;
            match se {
                Some(se) => {
                    let color = se.css_color();
                    let dash = match se.stroke {
                        Stroke::Solid => "",
                        Stroke::Dashed => " stroke-dasharray=\"6 4\"",
                        Stroke::Before => " stroke-dasharray=\"3 3\" stroke-opacity=0.6",
                    };
                    let _ = write!(
                        s,
                        "<line x1={lx} y1={y} x2={} y2={y} stroke=\"{color}\" stroke-width=2{dash} /><text x={} y={} class=legend fill=\"{color}\" style=\"fill:{color}\">{}</text>",
                        lx + 18.0,
                        lx + 22.0,
                        y + 4.0,
                        esc(name)
                    );
                }
                None => {
                    let _ = write!(
                        s,
                        "<rect x={lx} y={} width=18 height=9 class=band /><text x={} y={} class=legend>{}</text>",
                        y - 4.5,
                        lx + 22.0,
                        y + 4.0,
                        esc(name)
                    );
                }
            }
        }
        s.push_str("</svg>");
        let mut notes = self.notes.clone();
        for se in &self.series {
            if let (true, Some(why)) = (se.points.is_empty(), &se.why_empty) {
                notes.push(format!("{}: no data ({why}).", se.name));
            }
        }
        for n in notes {
            let _ = write!(s, "<p class=chartnote>{}</p>", esc(&n));
        }
        s.push_str("</figure>");
        s
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Every value of attribute `attr` in elements starting with `<tag` of `svg`.
    pub(crate) fn attrs(svg: &str, tag: &str, attr: &str) -> Vec<String> {
        let mut out = Vec::new();
        for el in svg.split('<').filter(|e| e.starts_with(tag)) {
            let el = el.split('>').next().unwrap_or("");
            let key = format!("{attr}=\"");
            if let Some(i) = el.find(&key) {
                let rest = &el[i + key.len()..];
                out.push(rest[..rest.find('"').unwrap()].to_owned());
            }
        }
        out
    }

    /// The texts of elements `<text …class=CLASS…>`.
    pub(crate) fn texts(svg: &str, class: &str) -> Vec<String> {
        svg.split("<text ")
            .skip(1)
            .filter(|t| {
                t.split('>')
                    .next()
                    .unwrap()
                    .contains(&format!("class={class}"))
            })
            .map(|t| {
                t.split_once('>')
                    .unwrap()
                    .1
                    .split('<')
                    .next()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    fn is_nice(step: f64) -> bool {
        let mag = 10f64.powf(step.log10().floor());
        let norm = step / mag;
        [1.0, 2.0, 5.0].iter().any(|n| (norm - n).abs() < 1e-9)
    }

    #[test]
    fn ticks_are_1_2_5_steps_that_cover_the_data() {
        for (max, want) in [
            (2490.0, vec![0.0, 500.0, 1000.0, 1500.0, 2000.0, 2500.0]),
            (4.7, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
            (1.0, vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
            (0.0, vec![0.0, 1.0]),
            (46.0, vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0]),
        ] {
            let t = nice_ticks(max, 5);
            assert_eq!(t.len(), want.len(), "{max}: {t:?}");
            for (a, b) in t.iter().zip(&want) {
                assert!((a - b).abs() < 1e-9, "{max}: {t:?}");
            }
        }
        for max in [0.013, 0.7, 3.3, 17.0, 623.0, 1246.0, 28_232.0, 1e6] {
            let t = nice_ticks(max, 5);
            assert!(is_nice(t[1]), "{max}: step {}", t[1]);
            assert!(*t.last().unwrap() >= max && t.len() <= 11, "{max}: {t:?}");
        }
        assert_eq!(tick_label(0.25, 0.05), "0.25");
        assert_eq!(tick_label(1500.0, 500.0), "1500");
    }

    fn chart() -> Chart {
        let mut c = Chart::new(
            "CPU, by container",
            "cores",
            vec![
                Series::new("gateway", 0, vec![(0.5, 0.4), (1.5, 0.5), (2.09, 3.0)]),
                Series::new("gateway quota", 0, vec![(0.5, 0.5), (2.09, 0.5)])
                    .stroke(Stroke::Dashed),
                Series::new("backend", 1, vec![]).or_why("cpu.stat not readable"),
            ],
        );
        c.marks = vec![(0.0, "step 1".into()), (1.0, "step 2".into())];
        c.bands = vec![Band {
            start: 1.0,
            end: 2.0,
            label: "driver saturated: CPU 190 % of 2 cores".into(),
        }];
        c.off_scale = vec![(2.0, 2.18)];
        c.x_max = Some(2.18);
        c
    }

    #[test]
    fn legends_wear_their_series_colours_and_limits_are_dashed() {
        let svg = chart().svg();
        let lines = attrs(&svg, "polyline", "stroke");
        assert_eq!(lines, vec![COLORS[0], COLORS[0]]);
        let legend = attrs(&svg, "text x", "fill");
        assert_eq!(legend, vec![COLORS[0], COLORS[0], COLORS[1]]);
        // The style attribute wins over any stylesheet rule for .legend.
        assert!(svg.contains(&format!("style=\"fill:{}\"", COLORS[0])));
        let dashed: Vec<&str> = svg
            .split("<polyline")
            .skip(1)
            .filter(|p| p.contains("stroke-dasharray"))
            .collect();
        assert_eq!(dashed.len(), 1, "the quota line, dashed");
        assert!(
            texts(&svg, "legend").contains(&"backend (no data)".to_owned()),
            "{svg}"
        );
        assert!(svg.contains("backend: no data (cpu.stat not readable)."));
        assert!(!svg.contains("<script") && !svg.contains("href"));
    }

    #[test]
    fn a_short_last_interval_does_not_set_the_scale_and_time_has_ticks() {
        let c = chart();
        // 3.0 cores at 2.09 s is off the scale: 0.5 sets it.
        assert_eq!(c.y_ticks().last().copied(), Some(0.5));
        let svg = c.svg();
        assert!(
            svg.contains("class=off><title>gateway at 2.09 s: 3.00 cores"),
            "{svg}"
        );
        let x: Vec<String> = texts(&svg, "tick")
            .into_iter()
            .filter(|t| t.ends_with(" s"))
            .collect();
        assert_eq!(x, vec!["0.0 s", "0.5 s", "1.0 s", "1.5 s", "2.0 s"]);
        let y: Vec<String> = texts(&svg, "tick")
            .into_iter()
            .filter(|t| !t.ends_with(" s"))
            .collect();
        assert_eq!(y, vec!["0.0", "0.1", "0.2", "0.3", "0.4", "0.5"]);
        // Phases at their start, saturated intervals shaded and in the legend.
        assert_eq!(texts(&svg, "mark"), vec!["step 1", "step 2"]);
        assert!(svg.contains("class=band><title>driver saturated: CPU 190 % of 2 cores"));
        assert!(texts(&svg, "legend").contains(&"driver saturated".to_owned()));
    }

    #[test]
    fn a_long_legend_widens_the_figure_not_the_cut() {
        let name = "game.evaluate (run 12)";
        let c = Chart::new("p99", "ms", vec![Series::new(name, 3, vec![])]);
        let svg = c.svg();
        let width: f64 = attrs(&svg, "svg", "width")[0].parse().unwrap();
        let legend_x = W - RIGHT + 10.0 + 22.0;
        let text = format!("{name} (no data)");
        assert!(
            legend_x + LEGEND_CHAR * text.len() as f64 <= width,
            "{width}: {svg}"
        );
        assert_eq!(
            attrs(&chart().svg(), "svg", "width"),
            vec![W.to_string()],
            "short names keep the default"
        );
    }

    #[test]
    fn an_empty_chart_says_why() {
        let mut c = Chart::new("TIME_WAIT", "sockets", vec![]);
        c.empty = Some("the run was started with --no-probe".into());
        let svg = c.svg();
        assert!(svg.contains("no data: the run was started with --no-probe"));
        assert!(!svg.contains("polyline") && !svg.contains("class=tick"));
    }
}
