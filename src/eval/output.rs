//! Where `gavel eval`'s report goes, and the one line it always says on stderr: the report in
//! its format (text, JSON or HTML) on standard output or in the `-o` file, then a summary
//! (each combination's pooled pairwise accuracy, invalid verdicts, the file written), whatever
//! the format, so a run that writes a page or a document still says how it went.

use std::path::Path;

use super::judged::Combo;
use super::report::{EvalReport, SetResult, ALL_SETS};
use super::{html, text, EvalFormat};
use crate::cli::{plural, CliError};
use crate::toolkit::output_file::write_text;

/// Writes the report in `format` to `output` (else standard output), then the summary line.
pub(super) fn write_report(
    report: &EvalReport,
    format: EvalFormat,
    output: Option<&Path>,
) -> Result<(), CliError> {
    // The text report shows each error's message; anywhere else (a file, JSON, HTML) the first
    // of each kind also goes to stderr, so a missing key is never only a count.
    if output.is_some() || format != EvalFormat::Text {
        let mut seen = std::collections::BTreeSet::new();
        for r in &report.results {
            for (kind, message) in &r.error_messages {
                if seen.insert(kind) {
                    eprintln!("gavel eval: {kind}: {message}");
                }
            }
        }
    }
    let doc = match format {
        EvalFormat::Text => text::render(report),
        EvalFormat::Json => {
            let mut s = serde_json::to_string_pretty(report)
                .map_err(|e| CliError::Other(format!("cannot serialise the report: {e}")))?;
            s.push('\n');
            s
        }
        EvalFormat::Html => html::render(report)
            .map_err(|e| CliError::Other(format!("cannot render the HTML report: {e:#}")))?,
    };
    match output {
        Some(path) => write_text(path, &doc).map_err(CliError::Io)?,
        None => print!("{doc}"),
    }
    eprintln!("{}", summary_line(report, output));
    Ok(())
}

/// `gavel eval: 40 groups · pairwise accuracy 0.812 [0.700, 0.900] (judge · rubric); ... ·
/// 2 invalid verdicts · wrote PATH`: each combination's figures over every set (the pooled
/// figures when there are several sets; with one, its own).
pub fn summary_line(report: &EvalReport, output: Option<&Path>) -> String {
    let pooled = report.results.iter().any(|r| r.set == ALL_SETS);
    let overall: Vec<&SetResult> = report
        .results
        .iter()
        .filter(|r| !pooled || r.set == ALL_SETS)
        .collect();
    let groups = overall.first().map_or(0, |r| r.groups);
    let figures: Vec<String> = overall
        .iter()
        .map(|r| {
            let combo = Combo {
                judge: r.judge.clone(),
                rubric: r.rubric.clone(),
                judge_mode: r.judge_mode,
            };
            let acc = r
                .pairwise_accuracy
                .map_or_else(|| "—".into(), |a| format!("{a:.3}"));
            let ci = r
                .ci95
                .map_or_else(String::new, |[lo, hi]| format!(" [{lo:.3}, {hi:.3}]"));
            format!("{acc}{ci} ({})", combo.label())
        })
        .collect();
    let mut line = format!(
        "gavel eval: {} · pairwise accuracy {}",
        plural(groups, "group", "groups"),
        figures.join("; ")
    );
    let invalid: usize = overall.iter().map(|r| r.invalid).sum();
    if invalid > 0 {
        line.push_str(&format!(
            " · {}",
            plural(invalid, "invalid verdict", "invalid verdicts")
        ));
    }
    if let Some(path) = output {
        line.push_str(&format!(" · wrote {}", path.display()));
    }
    line
}
