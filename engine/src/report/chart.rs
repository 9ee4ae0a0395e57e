//! Inline SVG charts for `flow report`: a line chart (bus bandwidth by
//! message size, loss by step) and a Gantt chart (where an apply's time
//! went). Plain SVG, no script: readable in any browser, offline.

use std::fmt::Write;

/// Text made safe inside XML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// What the legend calls it.
    pub label: String,
    /// Its points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Drawn bold (the newest run), else faded (earlier ones).
    pub newest: bool,
}

/// A line chart's axes.
#[derive(Debug, Clone)]
pub struct Axes<'a> {
    /// The chart's `id` (for the tests and the page's links).
    pub id: &'a str,
    /// The x axis' name.
    pub x: &'a str,
    /// The y axis' name.
    pub y: &'a str,
    /// Whether x is a power of two scale (message sizes).
    pub log2_x: bool,
}

const W: f64 = 760.0;
const H: f64 = 320.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 48.0;

/// Bytes as people write them: `8 MiB`.
pub fn bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = v;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{} {}", (v * 10.0).round() / 10.0, UNITS[unit])
}

/// A line chart of `series`, the newest drawn last and bold.
pub fn lines(axes: &Axes, series: &[Series]) -> String {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
    let fx = |x: f64| if axes.log2_x { x.max(1.0).log2() } else { x };
    let (x0, x1) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| {
        (a.min(fx(*x)), b.max(fx(*x)))
    });
    let y1 = all.iter().map(|(_, y)| *y).fold(0.0, f64::max) * 1.08;
    let (x0, x1) = if x1 > x0 {
        (x0, x1)
    } else {
        (x0 - 1.0, x0 + 1.0)
    };
    let y1 = if y1 > 0.0 { y1 } else { 1.0 };
    let px = |x: f64| LEFT + (fx(x) - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let py = |y: f64| TOP + (1.0 - y / y1) * (H - TOP - BOTTOM);
    let mut out = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" id="{id}" class="chart" width="{W}" height="{total:.0}" viewBox="0 0 {W} {total:.0}" font-family="Helvetica, Arial, sans-serif" font-size="11">"##,
        id = escape(axes.id),
        // The legend goes under the plot, a line per series.
        total = H + 8.0 + series.len() as f64 * 16.0,
    );
    out.push_str(r##"<rect width="100%" height="100%" fill="#fff"/>"##);
    // Axes, grid and ticks.
    for i in 0..=4 {
        let y = y1 * i as f64 / 4.0;
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e5e7eb"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            py(y) + 4.0,
            short(y),
            yy = py(y)
        );
    }
    let ticks: Vec<f64> = if axes.log2_x {
        let (a, b) = (x0.ceil() as i32, x1.floor() as i32);
        let step = ((b - a) / 8).max(1);
        // Counted down from the largest size, so that it is labelled.
        let mut t: Vec<f64> = (a..=b)
            .rev()
            .step_by(step as usize)
            .map(|p| 2f64.powi(p))
            .collect();
        t.reverse();
        t
    } else {
        (0..=6).map(|i| x0 + (x1 - x0) * i as f64 / 6.0).collect()
    };
    for t in ticks {
        let label = if axes.log2_x { bytes(t) } else { short(t) };
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555">{}</text>"##,
            px(t),
            H - BOTTOM + 16.0,
            escape(&label)
        );
    }
    let _ = write!(
        out,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333">{}</text><text transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle" fill="#333">{}</text>"##,
        (LEFT + W - RIGHT) / 2.0,
        H - 10.0,
        escape(axes.x),
        (TOP + H - BOTTOM) / 2.0,
        escape(axes.y)
    );
    // Lines, the earlier ones first and faded.
    let mut ordered: Vec<&Series> = series.iter().filter(|s| !s.newest).collect();
    ordered.extend(series.iter().filter(|s| s.newest));
    let palette = ["#94a3b8", "#a5b4fc", "#fca5a5", "#fcd34d", "#86efac"];
    for (i, s) in ordered.iter().enumerate() {
        let (colour, width) = if s.newest {
            ("#1d4ed8", 2.6)
        } else {
            (palette[i % palette.len()], 1.4)
        };
        let d: Vec<String> = s
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = write!(
            out,
            r##"<polyline class="series" points="{}" fill="none" stroke="{colour}" stroke-width="{width}"><title>{}</title></polyline>"##,
            d.join(" "),
            escape(&s.label)
        );
        // A mark on each point: a run of one message size is still seen.
        for (x, y) in &s.points {
            let _ = write!(
                out,
                r##"<circle cx="{:.1}" cy="{:.1}" r="{:.1}" fill="{colour}"/>"##,
                px(*x),
                py(*y),
                width + 0.6
            );
        }
        let ly = H + 8.0 + i as f64 * 16.0;
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="{width}"/><text x="{:.1}" y="{:.1}" fill="#333">{}</text>"##,
            LEFT + 18.0,
            LEFT + 24.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
    out.push_str("</svg>");
    out
}

/// A figure for an axis: whole when it is, else with 2 decimals.
fn short(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round())
    } else {
        format!("{v:.2}")
    }
}

/// One bar of the Gantt chart.
#[derive(Debug, Clone)]
pub struct Bar {
    /// The step.
    pub step: String,
    /// Start and end, in seconds from the run's start.
    pub from: f64,
    /// End.
    pub to: f64,
    /// How it ended (`create`, `failed`, …).
    pub outcome: String,
}

/// Where an apply's time went: one bar per step, in start order.
pub fn gantt(id: &str, bars: &[Bar]) -> String {
    let end = bars.iter().map(|b| b.to).fold(0.0, f64::max).max(0.001);
    let label_w = bars
        .iter()
        .map(|b| b.step.chars().count())
        .max()
        .unwrap_or(4) as f64
        * 7.0
        + 16.0;
    let row = 22.0;
    let width = 760.0;
    let height = TOP + bars.len() as f64 * row + 40.0;
    let px = |t: f64| label_w + t / end * (width - label_w - 90.0);
    let mut out = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" id="{}" class="chart" width="{width}" height="{height:.0}" viewBox="0 0 {width} {height:.0}" font-family="Helvetica, Arial, sans-serif" font-size="11"><rect width="100%" height="100%" fill="#fff"/>"##,
        escape(id)
    );
    for i in 0..=5 {
        let t = end * i as f64 / 5.0;
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="#e5e7eb"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#555">{}</text>"##,
            height - 28.0,
            height - 14.0,
            escape(&seconds(t)),
            x = px(t)
        );
    }
    for (i, b) in bars.iter().enumerate() {
        let y = TOP + i as f64 * row;
        let colour = match b.outcome.as_str() {
            "failed" => "#dc2626",
            "skipped" | "not started" => "#9ca3af",
            "unchanged" => "#cbd5e1",
            _ => "#16a34a",
        };
        let w = (px(b.to) - px(b.from)).max(2.0);
        let _ = write!(
            out,
            r##"<g class="bar"><title>{step}: {outcome}, {took}</title><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#111">{step}</text><rect x="{:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" rx="3" fill="{colour}"/><text x="{:.1}" y="{:.1}" fill="#333">{took}</text></g>"##,
            label_w - 8.0,
            y + 15.0,
            px(b.from),
            y + 4.0,
            row - 8.0,
            px(b.from) + w + 6.0,
            y + 15.0,
            step = escape(&b.step),
            outcome = escape(&b.outcome),
            took = escape(&seconds(b.to - b.from)),
        );
    }
    out.push_str("</svg>");
    out
}

/// A duration as the charts show it, as everywhere else (`crate::duration`):
/// `840ms`, `42.0s`, `3m05s`.
pub fn seconds(s: f64) -> String {
    crate::duration::human_secs(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_chart_draws_each_series_with_its_legend_and_escapes_text() {
        let svg = lines(
            &Axes {
                id: "busbw",
                x: "message size",
                y: "busbw (GB/s)",
                log2_x: true,
            },
            &[
                Series {
                    label: "run <a>".into(),
                    points: vec![(8.0, 0.1), (1024.0, 2.0), (1048576.0, 40.0)],
                    newest: false,
                },
                Series {
                    label: "run b".into(),
                    points: vec![(8.0, 0.2), (1024.0, 2.5), (1048576.0, 44.0)],
                    newest: true,
                },
            ],
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("run &lt;a&gt;"), "{svg}");
        assert!(
            svg.contains(">1 MiB<") && svg.contains(">16 B<"),
            "the largest size labelled: {svg}"
        );
        // The newest is drawn last, bold.
        assert!(svg.rfind("stroke-width=\"2.6\"") > svg.find("stroke-width=\"1.4\""));
    }

    #[test]
    fn a_gantt_bar_per_step_coloured_by_outcome() {
        let svg = gantt(
            "gantt",
            &[
                Bar {
                    step: "vpc".into(),
                    from: 0.0,
                    to: 180.0,
                    outcome: "create".into(),
                },
                Bar {
                    step: "nccl".into(),
                    from: 180.0,
                    to: 240.0,
                    outcome: "failed".into(),
                },
            ],
        );
        assert_eq!(svg.matches("class=\"bar\"").count(), 2);
        assert!(svg.contains("#dc2626") && svg.contains("3m00s"), "{svg}");
    }

    /// A 12 ms run's axis: six ticks, each with its own label (they all
    /// read `0.0 s` before durations were written one way).
    #[test]
    fn a_short_runs_ticks_differ() {
        let svg = gantt(
            "gantt",
            &[Bar {
                step: "s".into(),
                from: 0.0,
                to: 0.012,
                outcome: "create".into(),
            }],
        );
        let ticks: Vec<&str> = svg
            .split(r##"text-anchor="middle" fill="#555">"##)
            .skip(1)
            .map(|t| t.split('<').next().unwrap())
            .collect();
        assert_eq!(ticks, ["0ms", "2ms", "4ms", "7ms", "9ms", "12ms"], "{svg}");
    }

    #[test]
    fn sizes_and_durations_read_as_people_write_them() {
        assert_eq!(bytes(8.0), "8 B");
        assert_eq!(bytes(17179869184.0), "16 GiB");
        assert_eq!(seconds(0.84), "840ms");
        assert_eq!(seconds(185.0), "3m05s");
    }
}
