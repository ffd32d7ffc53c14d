//! One module per subcommand, each with the `run` that `main.rs` dispatches to. This is the
//! binary's glue: it loads the configuration, calls the library and turns the outcome into an
//! exit code, so `anyhow` may appear here and nowhere in the library. Commands with a body of
//! their own in the library (`lint`, `diff`, `eval`, `rescore`, `train`, `bench-device`) get a
//! thin entry here; `select` reads and writes its files here around the pure `gavel::select`;
//! `serve`, `score`, `render`, `migrate` and `cache` are short enough to live here whole.

#[cfg(feature = "train")]
pub mod bench_device;
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

use gavel::groupfile::{override_request, read_groups, GroupIn};

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

/// Reads a group file with the shared reader and applies `--rubric`/`--judge` to every group.
fn read_overridden(
    path: &Path,
    max_group_size: usize,
    o: &Overrides,
) -> Result<Vec<GroupIn>, Vec<String>> {
    let mut groups = read_groups::<()>(path, max_group_size)?;
    for g in &mut groups {
        override_request(&mut g.request, o.rubric.as_deref(), o.judge.as_deref());
    }
    Ok(groups)
}
