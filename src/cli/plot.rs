//! `guardless bench … --plot FILE.svg|FILE.png`: time per call against size, for the graph
//! compiled once (unbacked) and, with `--compare-backed`, for the graphs compiled for each size
//! (backed, static); below it the ratios unbacked/static and unbacked/backed. Sizes on a log
//! scale, times on a log scale, ratios on a linear one with 1 marked.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

/// One line of the plot: a name and (size, value) points.
struct Series<'a> {
    name: &'a str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// Writes the plot of `rows` (the bench's rows: `size`, `unbacked_us`, and with
/// `--compare-backed` `backed_us`, `static_us`, `unbacked_over_*`) to `path`, SVG or PNG by its
/// extension. `symbol` names the size axis, `title` heads the plot.
pub fn write(path: &Path, rows: &[Value], symbol: &str, title: &str) -> Result<(), String> {
    let ext = check(path)?;
    let size = (960, 720);
    // Text is laid out with a font's metrics, in an SVG too.
    register_font().map_err(|e| format!("--plot {}: {e}", path.display()))?;
    let drawn = match ext.as_str() {
        "svg" => draw(
            SVGBackend::new(path, size).into_drawing_area(),
            rows,
            symbol,
            title,
        ),
        _ => draw(
            BitMapBackend::new(path, size).into_drawing_area(),
            rows,
            symbol,
            title,
        ),
    };
    drawn.map_err(|e| format!("--plot {}: {e}", path.display()))
}

/// The plot's format from `path`'s extension (`svg` or `png`), or the error naming the file.
pub fn check(path: &Path) -> Result<String, String> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
    {
        Some(ext) if ext == "svg" || ext == "png" => Ok(ext),
        _ => Err(format!(
            "--plot {}: expected a .svg or .png file",
            path.display()
        )),
    }
}

fn series<'a>(rows: &[Value], key: &str, name: &'a str, color: RGBColor) -> Option<Series<'a>> {
    let points: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r["size"].as_f64()?, r[key].as_f64()?)))
        .collect();
    (!points.is_empty()).then_some(Series {
        name,
        color,
        points,
    })
}

/// Sizes start at 0 or 1 as often as not: the log axis starts at 1 and a size 0 sits on it.
fn log_x(x: f64) -> f64 {
    x.max(1.0)
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    rows: &[Value],
    symbol: &str,
    title: &str,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let times: Vec<Series> = [
        series(rows, "unbacked_us", "unbacked (compiled once)", BLUE),
        series(rows, "backed_us", "backed (compiled per size)", RED),
        series(rows, "static_us", "static (compiled per size)", BLACK),
    ]
    .into_iter()
    .flatten()
    .collect();
    let ratios: Vec<Series> = [
        series(rows, "unbacked_over_static", "unbacked / static", BLACK),
        series(rows, "unbacked_over_backed", "unbacked / backed", RED),
    ]
    .into_iter()
    .flatten()
    .collect();
    if times.is_empty() {
        return Err("no timed sizes to plot".into());
    }
    let (top, bottom) = if ratios.is_empty() {
        (root.clone(), None)
    } else {
        let (t, b) = root.split_vertically(460);
        (t, Some(b))
    };
    let all = |s: &[Series], f: fn(&(f64, f64)) -> f64| -> (f64, f64) {
        s.iter()
            .flat_map(|s| s.points.iter().map(f))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    let (x_lo, x_hi) = all(&times, |p| log_x(p.0));
    let x_range = x_lo..(x_hi * 1.5).max(x_lo * 2.0);
    let (y_lo, y_hi) = all(&times, |p| p.1.max(1e-3));
    let mut chart = ChartBuilder::on(&top)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            x_range.clone().log_scale(),
            (y_lo / 1.5..y_hi * 1.5).log_scale(),
        )
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(symbol)
        .y_desc("µs per call (median)")
        .draw()
        .map_err(e)?;
    lines(
        &mut chart,
        &times,
        |y| y.max(1e-3),
        SeriesLabelPosition::UpperLeft,
    )?;
    if let Some(bottom) = bottom {
        let (_, r_hi) = all(&ratios, |p| p.1);
        let mut chart = ChartBuilder::on(&bottom)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range.log_scale(), 0.0..(r_hi * 1.2).max(1.5))
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc(symbol)
            .y_desc("ratio (1 = as fast)")
            .draw()
            .map_err(e)?;
        let (lo, hi) = (x_lo, x_hi * 1.5);
        chart
            .draw_series(LineSeries::new(vec![(lo, 1.0), (hi, 1.0)], BLACK.mix(0.3)))
            .map_err(e)?;
        lines(&mut chart, &ratios, |y| y, SeriesLabelPosition::UpperRight)?;
    }
    root.present().map_err(e)
}

/// Each series as a line with a dot per size (its values through `y`), and the legend at `at`.
fn lines<'a, DB: DrawingBackend + 'a, CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'a, DB, CT>,
    series: &[Series],
    y: fn(f64) -> f64,
    at: SeriesLabelPosition,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    for s in series {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|&(px, py)| (log_x(px), y(py)))
            .collect();
        let color = s.color;
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(e)?
            .label(s.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(at)
        .draw()
        .map_err(e)
}

/// Text needs a font: the first of the usual TrueType sans-serif fonts found
/// (`ci/setup` installs DejaVu), registered once.
fn register_font() -> Result<(), String> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            const CANDIDATES: &[&str] = &[
                "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                "/usr/share/fonts/TTF/DejaVuSans.ttf",
                "/usr/share/fonts/dejavu/DejaVuSans.ttf",
                "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
                "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
            ];
            let path = CANDIDATES
                .iter()
                .find(|p| Path::new(p).is_file())
                .ok_or_else(|| {
                    format!(
                        "the plot's text needs a TrueType font and none was found ({}); \
                         install DejaVu (Debian: fonts-dejavu-core)",
                        CANDIDATES.join(", ")
                    )
                })?;
            let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path}: not a font plotters can read"))
        })
        .clone()
}
