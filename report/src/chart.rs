//! Timeline charts: the data a chart shows ([`Chart`], built with the report's sections) and
//! its self-contained SVG (no scripts, no network), which the HTML page embeds.

use std::fmt::Write as _;

use crate::html::esc;

/// One line chart over the run's time axis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chart {
    /// What it shows.
    pub title: String,
    /// The y axis's unit.
    pub unit: String,
    /// Named series of (seconds since the start, value) points.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Phase boundaries: (seconds since the start, the phase's name).
    pub marks: Vec<(f64, String)>,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

impl Chart {
    /// The chart as an SVG figure.
    pub fn svg(&self) -> String {
        let (title, unit, series, steps) = (&self.title, &self.unit, &self.series, &self.marks);
        let (w, h, left, bottom, top, right) = (760.0, 220.0, 60.0, 30.0, 24.0, 150.0);
        let xs = series.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x));
        let xmax = xs.fold(1.0f64, f64::max);
        let ymax = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.1;
        let px = |x: f64| left + (x / xmax) * (w - left - right);
        let py = |y: f64| top + (1.0 - y / ymax) * (h - top - bottom);
        let mut s = format!(
            "<figure><figcaption>{}</figcaption><svg viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=img aria-label=\"{}\">",
            esc(title),
            esc(title)
        );
        let _ = write!(
            s,
            "<line x1={left} y1={} x2={} y2={} class=axis /><line x1={left} y1={top} x2={left} y2={} class=axis />",
            h - bottom,
            w - right,
            h - bottom,
            h - bottom
        );
        for i in 0..=4 {
            let y = ymax * i as f64 / 4.0;
            let _ = write!(
                s,
                "<text x={} y={} class=tick text-anchor=end>{}</text>",
                left - 4.0,
                py(y) + 4.0,
                if ymax >= 100.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y:.2}")
                }
            );
        }
        let _ = write!(s, "<text x={left} y=14 class=tick>{}</text>", esc(unit));
        let _ = write!(
            s,
            "<text x={} y={} class=tick text-anchor=end>{xmax:.0} s</text>",
            w - right,
            h - 8.0
        );
        for (x, label) in steps {
            let _ = write!(
                s,
                "<line x1={0} y1={top} x2={0} y2={1} class=step /><text x={2} y={3} class=tick>{4}</text>",
                px(*x),
                h - bottom,
                px(*x) + 3.0,
                top + 10.0,
                esc(label)
            );
        }
        for (i, (name, pts)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let path: Vec<String> = pts
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            let _ = write!(
                s,
                "<polyline fill=none stroke=\"{color}\" stroke-width=1.5 points=\"{}\" />",
                path.join(" ")
            );
            let _ = write!(
                s,
                "<text x={} y={} fill=\"{color}\" class=legend>{}</text>",
                w - right + 8.0,
                top + 14.0 * (i as f64 + 1.0),
                esc(name)
            );
        }
        s.push_str("</svg></figure>");
        s
    }
}
