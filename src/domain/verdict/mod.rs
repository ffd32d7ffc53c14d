//! The verdict: what a judge must answer (its JSON schema) and how a reply becomes scores
//! (parse, repair, validation). Plain data and functions, part of the core: the pipeline parses
//! every backend's completion alike, so no judge backend owns this.

mod answer_mass;
mod parse;

pub use answer_mass::{answer_masses, logprobs_at};
pub use parse::{parse_verdict, ItemVerdict, ParseOptions, ParseProblem, ParsedScore};

use serde_json::{json, Value};

/// The JSON schema of a verdict for the trajectory ids in a prompt (and checklist item ids, when
/// the rubric has items). Used as the structured-output `response_format`.
pub fn verdict_schema(ids: &[String], item_ids: &[String]) -> Value {
    let mut entry_props = json!({
        "trajectory_id": {"type": "string", "enum": ids},
        "explanation": {"type": "string"},
        "score": {"type": "number"},
    });
    let mut required = vec!["trajectory_id", "explanation", "score"];
    if !item_ids.is_empty() {
        entry_props["items"] = json!({
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "string", "enum": item_ids}, "met": {"type": "boolean"}},
                "required": ["id", "met"],
                "additionalProperties": false,
            },
        });
        required.insert(2, "items");
    }
    json!({
        "type": "object",
        "properties": {
            "scores": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": entry_props,
                    "required": required,
                    "additionalProperties": false,
                },
            },
        },
        "required": ["scores"],
        "additionalProperties": false,
    })
}
