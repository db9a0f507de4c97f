//! The simulation's plots, as SVG and PNG (`plotters`): the fleet over time, and the
//! cost-versus-wait curve of a sweep.
//!
//! Text is drawn with a TrueType font found on the system (Debian's fonts-dejavu-core);
//! without one the plots cannot be labelled, and that is an error that names the package.

use anyhow::{Result, anyhow};
use chrono::{DateTime, Utc};
use flotilla_sim::{Outcome, Sample};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// A line of a chart: its legend, its colour, and how it reads a value from a row.
type Line<Row, Value> = (&'static str, RGBColor, fn(&Row) -> Value);

/// Points drawn per series at most: samples are merged (by their maximum) beyond that.
const MAX_POINTS: usize = 1500;

/// Where fonts are looked for.
const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a font for plotters once per process.
fn font() -> Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = FONTS
                .iter()
                .find_map(|p| std::fs::read(p).ok())
                .ok_or_else(|| {
                    format!(
                        "no TrueType font found to label the plots (looked at {}); install \
                         Debian's fonts-dejavu-core",
                        FONTS.join(", ")
                    )
                })?;
            // Plotters keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| "the font file does not load".to_string())
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Merges samples into at most [`MAX_POINTS`], each the maximum of its bucket (a peak must
/// stay visible).
fn downsample(samples: &[Sample]) -> Vec<Sample> {
    if samples.len() <= MAX_POINTS {
        return samples.to_vec();
    }
    let per = samples.len().div_ceil(MAX_POINTS);
    samples
        .chunks(per)
        .map(|c| Sample {
            t: c[0].t,
            instances: c.iter().map(|s| s.instances).max().unwrap_or(0),
            busy: c.iter().map(|s| s.busy).max().unwrap_or(0),
            idle: c.iter().map(|s| s.idle).max().unwrap_or(0),
            waiting: c.iter().map(|s| s.waiting).max().unwrap_or(0),
        })
        .collect()
}

/// Writes `<name>.svg` and `<name>.png` in `dir`: instances, busy and idle slots, and
/// waiting jobs over time. Returns the files written.
pub(crate) fn fleet(
    o: &Outcome,
    dir: &Path,
    name: &str,
    title: &str,
    start: DateTime<Utc>,
) -> Result<Vec<String>> {
    font()?;
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    let points = downsample(&o.samples);
    {
        let root = SVGBackend::new(&svg, (1200, 600)).into_drawing_area();
        draw_fleet(&root, &points, o, title, start)?;
        root.present()
            .map_err(|e| anyhow!("{}: {e}", svg.display()))?;
    }
    {
        let root = BitMapBackend::new(&png, (1200, 600)).into_drawing_area();
        draw_fleet(&root, &points, o, title, start)?;
        root.present()
            .map_err(|e| anyhow!("{}: {e}", png.display()))?;
    }
    Ok(vec![svg.display().to_string(), png.display().to_string()])
}

fn draw_fleet<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    points: &[Sample],
    o: &Outcome,
    title: &str,
    start: DateTime<Utc>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the plot: {e}");
    root.fill(&WHITE).map_err(e)?;
    let days = (o.span.as_secs_f64() / 86400.0).max(1.0 / 24.0);
    let top = points
        .iter()
        .map(|s| s.instances.max(s.busy + s.idle).max(s.waiting))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.1;
    let caption = format!(
        "{title}: {} jobs from {}, {:.0} instance-hours, wait p95 {:.1} s",
        o.jobs,
        start.format("%Y-%m-%d"),
        o.instance_seconds / 3600.0,
        o.wait_quantile(0.95)
    );
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..days, 0.0..top)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("days since the start")
        .y_desc("count")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    let series: [Line<Sample, u32>; 4] = [
        ("instances", RGBColor(9, 105, 218), |s| s.instances),
        ("busy slots", RGBColor(191, 135, 0), |s| s.busy),
        ("idle slots", RGBColor(45, 164, 78), |s| s.idle),
        ("jobs waiting", RGBColor(207, 34, 46), |s| s.waiting),
    ];
    for (label, color, value) in series {
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|s| (s.t / 86400.0, f64::from(value(s)))),
                // One pixel: the bitmap backend joins wider strokes with mitres, which on a
                // series that jumps every sample draw spikes past the data (above capacity,
                // below zero); the SVG of the same data has none.
                color.stroke_width(1),
            ))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(e)?;
    Ok(())
}

/// One value of a sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SweepRow {
    pub(crate) value: f64,
    pub(crate) instance_hours: f64,
    pub(crate) p50: f64,
    pub(crate) p95: f64,
    pub(crate) p99: f64,
}

/// Writes `sweep-<key>.svg` and `.png`: wait quantiles against instance-hours, one point per
/// value. Returns the files written.
pub(crate) fn sweep(rows: &[SweepRow], key: &str, dir: &Path, runner: &str) -> Result<Vec<String>> {
    font()?;
    let svg = dir.join(format!("sweep-{key}.svg"));
    let png = dir.join(format!("sweep-{key}.png"));
    {
        let root = SVGBackend::new(&svg, (900, 560)).into_drawing_area();
        draw_sweep(&root, rows, key, runner)?;
        root.present()
            .map_err(|e| anyhow!("{}: {e}", svg.display()))?;
    }
    {
        let root = BitMapBackend::new(&png, (900, 560)).into_drawing_area();
        draw_sweep(&root, rows, key, runner)?;
        root.present()
            .map_err(|e| anyhow!("{}: {e}", png.display()))?;
    }
    Ok(vec![svg.display().to_string(), png.display().to_string()])
}

fn draw_sweep<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    rows: &[SweepRow],
    key: &str,
    runner: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the plot: {e}");
    root.fill(&WHITE).map_err(e)?;
    let (mut x0, mut x1) = rows.iter().fold((f64::MAX, f64::MIN), |(a, b), r| {
        (a.min(r.instance_hours), b.max(r.instance_hours))
    });
    if x1.partial_cmp(&x0) != Some(std::cmp::Ordering::Greater) {
        x0 -= 1.0;
        x1 += 1.0;
    }
    let pad = (x1 - x0) * 0.08;
    let ymax = rows.iter().map(|r| r.p99).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("{runner}: cost against job wait, sweeping {key}"),
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d((x0 - pad)..(x1 + pad), 0.0..ymax)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("instance-hours")
        .y_desc("job wait, seconds")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    let quantiles: [Line<SweepRow, f64>; 3] = [
        ("wait p50", RGBColor(45, 164, 78), |r| r.p50),
        ("wait p95", RGBColor(191, 135, 0), |r| r.p95),
        ("wait p99", RGBColor(207, 34, 46), |r| r.p99),
    ];
    for (label, color, q) in quantiles {
        chart
            .draw_series(LineSeries::new(
                rows.iter().map(|r| (r.instance_hours, q(r))),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
        chart
            .draw_series(
                rows.iter()
                    .map(|r| Circle::new((r.instance_hours, q(r)), 4, color.filled())),
            )
            .map_err(e)?;
    }
    chart
        .draw_series(rows.iter().map(|r| {
            Text::new(
                format!("{key}={}", r.value),
                (r.instance_hours, r.p99),
                ("sans-serif", 13).into_font(),
            )
        }))
        .map_err(e)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    Ok(())
}
