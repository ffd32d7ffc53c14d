//! One module per subcommand, each with the `run` that `main.rs` dispatches to. This is the
//! binary's glue: it loads the configuration, calls the library and turns the outcome into an
//! exit code, so `anyhow` may appear here and nowhere in the library. Commands with a body of
//! their own in the library (`lint`, `diff`, `eval`, `rescore`, `train`, `bench-device`, `bench-load`) get a
//! thin entry here; `select` reads and writes its files here around the pure `gavel::toolkit::select`;
//! `serve`, `score`, `render`, `migrate` and `cache` are short enough to live here whole.

#[cfg(feature = "train")]
pub mod bench_device;
#[cfg(feature = "train")]
pub mod bench_load;
pub mod cache;
pub mod diff;
pub mod eval;
pub mod lint;
pub mod migrate;
pub mod render;
pub mod rescore;
pub mod score;
pub mod select;
pub mod serve;
#[cfg(feature = "train")]
pub mod train;

use std::path::Path;

use clap::Args;

use gavel::score::Scorer;
use gavel::toolkit::groupfile::{override_request, print_problems, read_checked, GroupIn};

/// `--rubric` and `--judge` of `score` and `render`.
#[derive(Args, Clone)]
pub struct Overrides {
    /// Use this rubric (a name from rubrics/ or the config's rubrics_dir) for every group.
    #[arg(long, env = "GAVEL_RUBRIC")]
    rubric: Option<String>,
    /// Use this judge (a name from the config) for every group.
    #[arg(long, env = "GAVEL_JUDGE")]
    judge: Option<String>,
}

/// Reads a group file with the shared reader, applies `--rubric`/`--judge` to every group and
/// checks every group's request with `scorer` (see [`read_checked`]). An unknown `--rubric` or
/// `--judge` is one usage line, `gavel CMD: --rubric: ...`, not the same problem on every line.
/// `Err` is the exit code, 2, after the problems are printed: nothing is judged.
fn read_overridden(
    cmd: &str,
    path: &Path,
    scorer: &Scorer,
    o: &Overrides,
) -> Result<Vec<GroupIn>, u8> {
    let mut usage = Vec::new();
    if let Some(r) = &o.rubric {
        if let Err(e) = scorer.rubrics().get(r) {
            usage.push(format!("gavel {cmd}: --rubric: {e}"));
        }
    }
    if let Some(j) = &o.judge {
        if let Err(e) = scorer.check_judge_name(j) {
            usage.push(format!("gavel {cmd}: --judge: {e}"));
        }
    }
    if !usage.is_empty() {
        return Err(print_problems(&usage));
    }
    let mut groups = read_checked::<()>(path, scorer, |g| {
        let mut r = g.request.clone();
        override_request(&mut r, o.rubric.as_deref(), o.judge.as_deref());
        vec![r]
    })
    .map_err(|p| print_problems(&p))?;
    for g in &mut groups {
        override_request(&mut g.request, o.rubric.as_deref(), o.judge.as_deref());
    }
    Ok(groups)
}
