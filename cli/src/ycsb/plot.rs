//! `wisckey plot` (feature `plot`): grouped bar charts, as SVG, of the peer/wisckey ratios
//! that scripts/compare.sh summarises into JSON; pure Rust, no fonts or system libraries.
//!
//! Input: `{"charts": [{"title": "...", "file": "x.svg", "groups": ["100 B", ...],
//! "series": [{"name": "fjall", "values": [1.2, null, ...]}, ...]}]}`.

use std::path::PathBuf;

use clap::Args;
use plotters::prelude::*;
use serde_json::Value;

use crate::bench::CliResult;

#[derive(Debug, Clone, Args)]
pub struct PlotArgs {
    /// The summary JSON written by scripts/compare.sh.
    #[arg(long)]
    pub input: PathBuf,
    /// Directory the SVG files go to (created if missing).
    #[arg(long = "out-dir")]
    pub out_dir: PathBuf,
}

/// One chart: a group of bars per label, one bar per series.
struct Chart {
    title: String,
    file: String,
    groups: Vec<String>,
    series: Vec<(String, Vec<Option<f64>>)>,
}

fn parse(v: &Value) -> CliResult<Vec<Chart>> {
    let charts = v["charts"].as_array().ok_or("the summary has no \"charts\" array")?;
    charts
        .iter()
        .map(|c| {
            let text = |k: &str| c[k].as_str().map(str::to_string).ok_or(format!("a chart has no \"{k}\""));
            let groups: Vec<String> = c["groups"]
                .as_array()
                .ok_or("a chart has no \"groups\"")?
                .iter()
                .map(|g| g.as_str().unwrap_or("?").to_string())
                .collect();
            let series = c["series"]
                .as_array()
                .ok_or("a chart has no \"series\"")?
                .iter()
                .map(|s| {
                    let values = s["values"].as_array().map_or(Vec::new(), |v| v.iter().map(Value::as_f64).collect());
                    (s["name"].as_str().unwrap_or("?").to_string(), values)
                })
                .collect();
            Ok(Chart { title: text("title")?, file: text("file")?, groups, series })
        })
        .collect()
}

/// Run `wisckey plot`.
pub fn run(a: PlotArgs) -> CliResult {
    let text = std::fs::read_to_string(&a.input).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let charts = parse(&serde_json::from_str(&text)?)?;
    std::fs::create_dir_all(&a.out_dir)?;
    for c in &charts {
        // The file name comes from our own summary; keep it inside the output directory anyway.
        let name = std::path::Path::new(&c.file).file_name().ok_or("a chart's file has no name")?;
        let path = a.out_dir.join(name);
        draw(c, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn draw(c: &Chart, path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    // Ratios span orders of magnitude: a log axis that always shows parity (1.0).
    let values = || c.series.iter().flat_map(|(_, v)| v.iter().flatten().copied()).filter(|v| *v > 0.0);
    let top = values().fold(1.0f64, f64::max) * 1.5;
    let bottom = values().fold(1.0f64, f64::min) / 1.5;
    let ngroups = c.groups.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..ngroups as f64, (bottom..top).log_scale())?;
    let groups = c.groups.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(ngroups * 2 + 1)
        .x_label_formatter(&move |x| {
            // Label only the group centres (x = i + 0.5).
            let i = (x - 0.5).round();
            if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                groups.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_labels(8)
        .y_label_formatter(&|v| if *v >= 1.0 { format!("{v:.1}") } else { format!("{v:.2}") })
        .y_desc("ratio (log scale)")
        .draw()?;
    let width = 0.8 / c.series.len().max(1) as f64;
    for (si, (name, values)) in c.series.iter().enumerate() {
        let color = PALETTE[si % PALETTE.len()];
        let bars = values.iter().enumerate().filter_map(|(gi, v)| {
            let x0 = gi as f64 + 0.1 + si as f64 * width;
            v.filter(|v| *v > 0.0).map(|v| Rectangle::new([(x0, bottom), (x0 + width * 0.9, v)], color.filled()))
        });
        chart
            .draw_series(bars)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    // The parity line: above it wisckey is faster.
    chart.draw_series(std::iter::once(PathElement::new(vec![(0.0, 1.0), (ngroups as f64, 1.0)], BLACK)))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg_per_chart() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("s.json");
        std::fs::write(
            &input,
            r#"{"charts":[{"title":"fillrandom","file":"../fill.svg","groups":["100 B","1 KB"],
               "series":[{"name":"fjall","values":[1.5,null]},{"name":"rocksdb","values":[2.0,0.8]}]}]}"#,
        )
        .unwrap();
        run(PlotArgs { input, out_dir: dir.path().join("out") }).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("out/fill.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("fillrandom") && svg.contains("rocksdb"));
        assert!(parse(&serde_json::json!({"charts": [{"title": "x"}]})).is_err());
    }
}
