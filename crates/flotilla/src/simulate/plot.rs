//! The simulation's plots, as SVG and PNG (`plotters`): the fleet over time, and the
//! cost-versus-wait curve of a sweep.
//!
//! Text is drawn with a TrueType font found on the system (Debian's fonts-dejavu-core);
//! without one the plots cannot be labelled, and that is an error that names the package.

use super::labels;
use anyhow::{Result, anyhow};
use chrono::{DateTime, Utc};
use flotilla_sim::{Outcome, Sample};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
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

/// The fleet plot's size: two panels, one above the other.
const FLEET_SIZE: (u32, u32) = (1200, 800);

/// Writes `<name>.svg` and `<name>.png` in `dir`: instances, busy and idle slots over time
/// in one panel, jobs waiting for a slot in another below it, each with its own y-axis (a
/// queue of thousands would flatten a fleet of ten to the floor of a shared one). Returns
/// the files written.
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
        let root = SVGBackend::new(&svg, FLEET_SIZE).into_drawing_area();
        draw_fleet(&root, &points, o, title, start)?;
        root.present()
            .map_err(|e| anyhow!("{}: {e}", svg.display()))?;
    }
    {
        let root = BitMapBackend::new(&png, FLEET_SIZE).into_drawing_area();
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
    let mut caption = format!(
        "{title}: {} jobs from {}, {:.0} instance-hours, wait p95 {:.1} s",
        o.jobs,
        start.format("%Y-%m-%d"),
        o.instance_seconds / 3600.0,
        o.wait_quantile(0.95)
    );
    if o.dropped_pending > 0 {
        caption.push_str(&format!(", {} failed pending", o.dropped_pending));
    }
    let body = root.titled(&caption, ("sans-serif", 20)).map_err(e)?;
    let (fleet, queue) = body.split_vertically(body.dim_in_pixel().1 * 3 / 5);
    let fleet_series: [Line<Sample, u32>; 3] = [
        ("instances", RGBColor(9, 105, 218), |s| s.instances),
        ("busy slots", RGBColor(191, 135, 0), |s| s.busy),
        ("idle slots", RGBColor(45, 164, 78), |s| s.idle),
    ];
    panel(
        &fleet,
        points,
        days,
        "instances and slots",
        &fleet_series,
        false,
    )?;
    let queue_series: [Line<Sample, u32>; 1] =
        [("jobs waiting for a slot", RGBColor(207, 34, 46), |s| {
            s.waiting
        })];
    panel(&queue, points, days, "jobs waiting", &queue_series, true)?;
    Ok(())
}

/// One panel of the fleet plot: `series` over `days`, on a y-axis of their own.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    points: &[Sample],
    days: f64,
    y_desc: &str,
    series: &[Line<Sample, u32>],
    x_axis: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the plot: {e}");
    let top = points
        .iter()
        .flat_map(|s| series.iter().map(move |(_, _, v)| v(s)))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .margin_right(24)
        .x_label_area_size(if x_axis { 40 } else { 24 })
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..days, 0.0..top)
        .map_err(e)?;
    let mut mesh = chart.configure_mesh();
    mesh.y_desc(y_desc)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 14));
    if x_axis {
        mesh.x_desc("days since the start");
    }
    mesh.draw().map_err(e)?;
    for (label, color, value) in series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|s| (s.t / 86400.0, f64::from(value(s)))),
                // One pixel: the bitmap backend joins wider strokes with mitres, which on a
                // series that jumps every sample draw spikes past the data (above capacity,
                // below zero); the SVG of the same data has none.
                color.stroke_width(1),
            ))
            .map_err(e)?
            .label(*label)
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
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SweepRow {
    /// `key=value`, written beside its point.
    pub(crate) label: String,
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
    // Room for the labels beside the outermost points.
    let pad = (x1 - x0) * 0.12;
    let ymax = rows.iter().map(|r| r.p99).fold(1.0, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("{runner}: cost against job wait, sweeping {key}"),
            ("sans-serif", 20),
        )
        .margin(16)
        .margin_right(28)
        .x_label_area_size(44)
        .y_label_area_size(72)
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
    // Each point's label beside it, where no other label is (`labels::place`).
    let style = ("sans-serif", 13)
        .into_font()
        .into_text_style(root)
        .pos(Pos::new(HPos::Left, VPos::Top));
    let points: Vec<(i32, i32)> = rows
        .iter()
        .map(|r| chart.backend_coord(&(r.instance_hours, r.p99)))
        .collect();
    let sizes = rows
        .iter()
        .map(|r| root.estimate_text_size(&r.label, &style).map_err(e))
        .collect::<Result<Vec<_>>>()?;
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    let area = labels::Area {
        left: xs.start,
        right: xs.end,
        top: ys.start,
        bottom: ys.end,
    };
    for (r, at) in rows.iter().zip(labels::place(&points, &sizes, area)) {
        root.draw(&Text::new(r.label.clone(), at, style.clone()))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    Ok(())
}
