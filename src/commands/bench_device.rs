//! `gavel bench-device`: the entry to [`gavel::devbench`] (what `benches/gpu.sh` runs).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use gavel::devbench::{shape_by_name, BenchOptions};

#[derive(Args)]
pub struct BenchDeviceArgs {
    /// Model shapes, comma-separated: tiny, 0.5b, 1.5b (Qwen2.5's); the first is also trained
    /// and checked across devices.
    #[arg(
        long,
        env = "GAVEL_BENCH_SHAPES",
        value_delimiter = ',',
        default_value = "0.5b,1.5b"
    )]
    shapes: Vec<String>,
    /// Devices to time (repeat or comma-separate: cuda:0, cpu); the first also trains.
    #[arg(
        long = "device",
        env = "GAVEL_BENCH_DEVICES",
        value_delimiter = ',',
        default_value = "cpu"
    )]
    devices: Vec<String>,
    /// Time whole groups on these devices only (default: every device).
    #[arg(
        long = "group-device",
        env = "GAVEL_BENCH_GROUP_DEVICES",
        value_delimiter = ','
    )]
    group_devices: Vec<String>,
    /// Folder for the random models, device-bench.json and device-bench.md.
    #[arg(
        short = 'o',
        long = "output",
        alias = "out",
        env = "GAVEL_BENCH_OUT",
        default_value = "target/device-bench"
    )]
    out: PathBuf,
    /// Decode steps timed on the bare model.
    #[arg(long, env = "GAVEL_BENCH_DECODE_STEPS", default_value_t = 64)]
    decode_steps: usize,
    /// The first device's peak dense f32 TFLOP/s, for the training step's MFU (omitted: no MFU).
    #[arg(long, env = "GAVEL_BENCH_PEAK_TFLOPS")]
    peak_tflops: Option<f64>,
}

pub fn run(args: BenchDeviceArgs) -> anyhow::Result<ExitCode> {
    if let Some(bad) = args.shapes.iter().find(|s| shape_by_name(s).is_none()) {
        anyhow::bail!("--shapes: unknown shape {bad:?} (tiny, 0.5b or 1.5b)");
    }
    let o = BenchOptions {
        shapes: args.shapes,
        devices: args.devices,
        out: args.out,
        decode_steps: args.decode_steps,
        peak_tflops: args.peak_tflops,
        group_devices: (!args.group_devices.is_empty()).then_some(args.group_devices),
    };
    // Its own thread: the benchmark drives its own runtime and blocking model threads.
    let report = std::thread::spawn(move || gavel::devbench::run(&o))
        .join()
        .map_err(|_| anyhow::anyhow!("the benchmark thread panicked"))??;
    // The report is written either way; logits that disagree beyond the tolerance fail the run.
    let check = &report["logits_check"];
    if check["agree"] != true {
        eprintln!(
            "bench-device: logits on {} and cpu differ by {} (tolerance {})",
            check["devices"][0], check["max_abs_diff"], check["tolerance"]
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
