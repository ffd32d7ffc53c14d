//! `gavel bench-load`: the entry to [`gavel::devbench::load`] (what `benches/judge_load.sh` and
//! `benches/gpu.sh` run).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use gavel::devbench::load::{self, LoadOptions};
use gavel::devbench::shape_by_name;
use gavel::domain::prompt::JudgeMode;

#[derive(Args)]
pub struct BenchLoadArgs {
    /// The model: a GGUF file or model folder, or a shape (tiny, 0.5b, 1.5b) written with
    /// random weights into the output folder.
    #[arg(long, env = "GAVEL_BENCH_MODEL")]
    model: String,
    /// The device the judge runs on (cpu, cuda:0).
    #[arg(long, env = "GAVEL_BENCH_DEVICE", default_value = "cpu")]
    device: String,
    /// Distinct groups sent in each run.
    #[arg(long, env = "GAVEL_BENCH_GROUPS", default_value_t = 16)]
    groups: usize,
    /// Groups in flight at once, one run each (comma-separated; 1: one after another).
    #[arg(
        long,
        env = "GAVEL_BENCH_CONCURRENCY",
        value_delimiter = ',',
        default_value = "1,16"
    )]
    concurrency: Vec<usize>,
    /// The engine's max_batch_tokens settings compared, a daemon each (0: each prompt alone).
    #[arg(
        long,
        env = "GAVEL_BENCH_MAX_BATCH_TOKENS",
        value_delimiter = ',',
        default_value = "1024"
    )]
    max_batch_tokens: Vec<usize>,
    /// The engine's max_decode_batch settings compared, a daemon each (1: one generation at a
    /// time).
    #[arg(
        long,
        env = "GAVEL_BENCH_MAX_DECODE_BATCH",
        value_delimiter = ',',
        default_value = "8"
    )]
    max_decode_batch: Vec<usize>,
    /// How the groups are judged: pointwise or pairwise (questions), or listwise (decoded
    /// verdicts).
    #[arg(long, env = "GAVEL_BENCH_MODE", default_value = "pointwise")]
    mode: JudgeMode,
    /// Cap on each explanation, bytes: a listwise verdict's, or in pointwise and pairwise mode
    /// the explanation decoded after each score (0: none).
    #[arg(long, env = "GAVEL_BENCH_EXPLAIN_BYTES", default_value_t = 0)]
    explain_bytes: usize,
    /// Folder for bench-load.json, bench-load.md and any random-weight model.
    #[arg(
        short = 'o',
        long = "output",
        env = "GAVEL_BENCH_OUT",
        default_value = "target/bench-load"
    )]
    out: PathBuf,
}

pub fn run(args: BenchLoadArgs) -> anyhow::Result<ExitCode> {
    if args.groups == 0 || args.concurrency.contains(&0) || args.max_decode_batch.contains(&0) {
        anyhow::bail!("--groups, --concurrency and --max-decode-batch must be at least 1");
    }
    std::fs::create_dir_all(&args.out)?;
    let model = match shape_by_name(&args.model) {
        Some(shape) => {
            let dir = args.out.join(format!("model-{}", args.model));
            gavel::devbench::write_model(&dir, shape)?;
            dir
        }
        None => PathBuf::from(&args.model),
    };
    let o = LoadOptions {
        model,
        device: gavel::model::DeviceSpec::parse(&args.device)?,
        groups: args.groups,
        concurrency: args.concurrency,
        max_batch_tokens: args.max_batch_tokens,
        max_decode_batch: args.max_decode_batch,
        mode: args.mode,
        explain_bytes: args.explain_bytes,
    };
    // Its own thread and runtime: the daemon, its model thread and the client share them.
    let report = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        anyhow::Ok(rt.block_on(load::figures(&o))?)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the benchmark thread panicked"))??;
    let json_path = args.out.join("bench-load.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)?)?;
    let table = load::markdown(&report);
    std::fs::write(args.out.join("bench-load.md"), &table)?;
    print!("{table}");
    Ok(ExitCode::SUCCESS)
}
