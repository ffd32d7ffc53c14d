//! What the command-line tools share, above the pipeline and below each tool: the group files
//! they read ([`groupfile`]) and the scored files they write and read back ([`scored`]), output
//! that is whole or not at all ([`output_file`]), a group's scoring outcome as `diff` and
//! `eval` record it ([`outcome`]), best-of-N selection ([`select`], shared by `gavel select`
//! and the trainer's offline source) the HTML kit of the reports ([`html`]), how a run ended
//! ([`exit`]), and the progress bar every long command draws ([`progress`]).

pub mod exit;
pub mod groupfile;
pub mod html;
pub mod outcome;
pub mod output_file;
pub mod progress;
pub mod scored;
pub mod select;
