//! The command line as a new user meets it: every bad line of a group file listed before any
//! judge call, whatever the command (input.rs); standard input as a group file (input.rs); a
//! closed pipe, `cache clear`'s confirmation and a store another process holds (process.rs);
//! help that lists only what a command reads, and the old flag spellings (help.rs); `score`
//! and `render` with eval's rows and judging flags, `-o` and progress (score_flags.rs).

#[path = "../common/mod.rs"]
mod common;

mod help;
mod input;
mod process;
mod score_flags;

use common::cli::{judge_toml, CliSetup};
use common::MockJudge;

/// A config whose default judge `mock` is the mock.
fn setup(mock: &MockJudge) -> CliSetup {
    CliSetup::new(&format!(
        "default_judge = \"mock\"\n{}",
        judge_toml("mock", mock, 1)
    ))
}
