//! What the command-line tools share, above the pipeline and below each tool: the group files
//! they read ([`groupfile`]) and the scored files they write and read back ([`scored`]), output
//! that is whole or not at all ([`output_file`]), best-of-N selection ([`select`], shared by
//! `gavel select` and the trainer's offline source) and the HTML kit of the reports ([`html`]).

pub mod groupfile;
pub mod html;
pub mod output_file;
pub mod scored;
pub mod select;
