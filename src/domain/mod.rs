//! The domain: plain data and functions, no I/O beyond reading a file a caller names, and no
//! import from any other layer of gavel. What a training loop sends ([`trajectory`], with
//! [`input`]'s refusals worded alike), what the judge reads ([`dedup`], [`prompt`] with
//! [`json_text`], [`rubric`]), what it answers ([`verdict`]), the verifiable rewards
//! ([`verify`]), and how it all becomes rewards and advantages ([`reward`]); plus what every
//! layer shares: [`error_chain`] (an error with its causes), [`error_type`] (`error.type`), [`rng`] (the one seeded generator),
//! [`seconds`] (durations in configuration), [`config_path`] (paths in a configuration file), [`secret`] (strings that never print themselves), [`spelling`] ("did you mean"),
//! [`stats`] (the statistics every tool shares).

pub mod attack;
pub mod config_path;
pub mod dedup;
pub mod device;
pub mod error_chain;
pub mod error_type;
pub mod input;
pub mod json_text;
pub mod prompt;
pub mod reward;
pub mod rng;
pub mod rubric;
pub mod seconds;
pub mod secret;
pub mod spelling;
pub mod stats;
pub mod trajectory;
pub mod trajectory_wire;
pub mod verdict;
pub mod verify;
