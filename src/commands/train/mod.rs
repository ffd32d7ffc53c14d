//! `gavel train`: its flags ([`args`], over the keys of `train.toml`) make a
//! [`gavel::train::plan::TrainPlan`], which the library runs.

mod args;
#[cfg(test)]
mod args_tests;
mod judge_args;

use std::process::ExitCode;

pub use args::TrainArgs;

pub async fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    keep_freed_memory();
    gavel::train::plan::run(args.plan()?).await?;
    Ok(ExitCode::SUCCESS)
}

/// mimalloc's `mi_option_purge_delay` (the same place in the option enum of mimalloc 2 and 3;
/// libmimalloc-sys names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells the allocator (main.rs's mimalloc) to keep the memory a training step frees for the
/// next step instead of returning it to the kernel a second later. A step allocates gigabytes
/// of activations and frees them; given back, every page is faulted in and zeroed again the
/// next step (a third of an SFT step's time on the 0.5B went to the kernel clearing pages:
/// BENCHMARKS.md, "Training: SFT throughput"). A training run is one job whose peak is its
/// steady state, so holding the peak costs nothing another step would not take back; the
/// daemon keeps mimalloc's default.
fn keep_freed_memory() {
    // SAFETY: sets one integer option; mimalloc reads options atomically.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}
