//! The model layer's test fixtures (`src/model/testkit.rs`: tiny random-weight models written
//! to disk), compiled into the tests rather than shipped in the library. That file reaches gavel
//! only through `super::Arch`, `super::random` and `super::tokenizer`, which this module
//! re-exports.

pub use gavel::model::{random, tokenizer, Arch};

#[path = "../../src/model/testkit.rs"]
pub mod testkit;
