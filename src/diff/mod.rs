//! `gavel diff`: scores every group under two rubrics (or two judges) and shows what changed.
//!
//! Both sides go through the same [`Scorer`], so every verdict lands in the verdict store and a
//! re-run makes no judge call. Per group the report has each trajectory's reward on both sides,
//! the delta B − A, average ranks, rank flips, Kendall's τ-b and the biggest mover; the summary
//! pools the groups that were scored on both sides. Output: a terminal table, one JSON
//! document or a self-contained HTML page ([`html`]), on standard output or in the `-o` file;
//! and, whatever the format, one summary line on stderr.

pub mod html;
pub mod report;
mod text;

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;

use crate::cli::{attach_store, build_scorer, CliError, ConfigSource};
use crate::domain::rubric::{RubricArg, RubricSet};
use crate::score::{ScoreRequest, Scorer};
use crate::toolkit::exit::Exit;
use crate::toolkit::groupfile::{
    override_request, print_problems, read_checked, GroupIn, KeptAside,
};
use crate::toolkit::outcome::{group_outcome, GroupOutcome};
use crate::toolkit::output_file::{make_parent, write_text};

pub use report::{
    build_report, compare_group, Comparison, DiffSummary, GroupError, GroupReport, Mover, PerSide,
    Report, SideReport, SideUsage, Sides, TopMover, TrajectoryRow,
};

/// How the report is written.
pub use crate::toolkit::output_file::ReportFormat as DiffFormat;

/// What `gavel diff` compares and how it reports.
#[derive(Debug, Clone)]
pub struct DiffOptions {
    /// Two rubrics (or one, for both sides of a judge comparison).
    pub rubrics: Vec<String>,
    /// Two judges (or one, for both sides of a rubric comparison).
    pub judges: Vec<String>,
    /// The report's format (the command line's `--format`, else the `-o` file's extension:
    /// `DiffFormat::choose`).
    pub format: DiffFormat,
    /// Where the report goes; none: standard output.
    pub output: Option<PathBuf>,
    /// Also write the HTML page here, the report still going to standard output (the old
    /// `--html`).
    pub html: Option<PathBuf>,
    /// Groups scored at once.
    pub concurrency: usize,
    /// The group file (`-`: standard input).
    pub file: PathBuf,
}

/// What the two sides differ in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compare {
    Rubric,
    Judge,
}

/// One side of the comparison: the rubric and judge every group is scored with (`None` = the
/// request's own, else the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideSpec {
    pub rubric: Option<String>,
    pub judge: Option<String>,
}

/// Works out the two sides from `--rubric` and `--judge`: exactly one of them names two.
pub fn sides(rubrics: &[String], judges: &[String]) -> Result<(Compare, [SideSpec; 2]), String> {
    const HOW: &str = "give --rubric A --rubric B (compare rubrics) or --judge A --judge B \
                       (compare judges)";
    if rubrics.len() > 2 || judges.len() > 2 {
        let (what, n) = if rubrics.len() > 2 {
            ("rubrics", rubrics.len())
        } else {
            ("judges", judges.len())
        };
        return Err(format!("{n} {what} given; a diff has two sides: {HOW}"));
    }
    let side = |r: Option<&String>, j: Option<&String>| SideSpec {
        rubric: r.cloned(),
        judge: j.cloned(),
    };
    match (rubrics.len(), judges.len()) {
        (2, 2) => Err(format!(
            "two rubrics and two judges given; compare one thing at a time: {HOW}"
        )),
        (2, _) => Ok((
            Compare::Rubric,
            [
                side(rubrics.first(), judges.first()),
                side(rubrics.get(1), judges.first()),
            ],
        )),
        (_, 2) => Ok((
            Compare::Judge,
            [
                side(rubrics.first(), judges.first()),
                side(rubrics.first(), judges.get(1)),
            ],
        )),
        _ => Err(format!("nothing to compare: {HOW}")),
    }
}

/// The request a group is scored with on one side (`rubric`: the side's `--rubric`, read).
fn side_request(
    g: &GroupIn<KeptAside>,
    side: &SideSpec,
    rubric: Option<&RubricArg>,
) -> ScoreRequest {
    let mut r = g.request.clone();
    override_request(&mut r, rubric, side.judge.as_deref());
    r
}

/// Scores every group on both sides (the two sides of a group at once), at most `concurrency`
/// groups at a time; the outcomes come back in file order.
async fn score_all(
    scorer: &Scorer,
    requests: &[[ScoreRequest; 2]],
    concurrency: usize,
) -> Vec<[GroupOutcome; 2]> {
    futures::stream::iter(requests)
        .map(|[a, b]| async move {
            let (a, b) = futures::join!(scorer.score_group(a), scorer.score_group(b));
            [group_outcome(a), group_outcome(b)]
        })
        .buffered(concurrency.max(1))
        .collect()
        .await
}

/// Done when every group was scored under both sides, Failed when a group failed, Refused for
/// a usage or file problem (reported on stderr, nothing scored).
pub async fn run(source: &ConfigSource, args: &DiffOptions) -> Result<Exit, CliError> {
    let usage_error = |m: String| {
        eprintln!("gavel diff: {m}");
        Ok(Exit::Refused)
    };
    let (compare, specs) = match sides(&args.rubrics, &args.judges) {
        Ok(s) => s,
        Err(m) => return usage_error(m),
    };
    let cfg = source.load_config()?;
    let rubrics =
        RubricSet::load(cfg.rubrics_dir.as_deref()).map_err(crate::score::BuildError::from)?;
    let mut read: [Option<RubricArg>; 2] = [None, None];
    for (s, read) in specs.iter().zip(&mut read) {
        if let Some(r) = &s.rubric {
            match rubrics.resolve_arg(r) {
                Ok(arg) => *read = Some(arg),
                Err(e) => return usage_error(format!("--rubric: {e}")),
            }
        }
        if let Some(j) = &s.judge {
            if !cfg.judges.contains_key(j) {
                return usage_error(format!("--judge: {}", cfg.unknown_judge(j)));
            }
        }
    }
    let scorer = build_scorer(&cfg)?;
    let groups = match read_checked::<KeptAside>(&args.file, &scorer, |g| {
        (0..2)
            .map(|i| side_request(g, &specs[i], read[i].as_ref()))
            .collect()
    }) {
        Ok(g) => g,
        Err(problems) => return Ok(print_problems(&problems)),
    };
    let requests: Vec<[ScoreRequest; 2]> = groups
        .iter()
        .map(|g| {
            [
                side_request(g, &specs[0], read[0].as_ref()),
                side_request(g, &specs[1], read[1].as_ref()),
            ]
        })
        .collect();
    for path in args.output.iter().chain(&args.html) {
        make_parent(path).map_err(CliError::Io)?;
    }

    let scorer: Arc<Scorer> = attach_store(scorer, &cfg).await?;
    let outcomes = score_all(&scorer, &requests, args.concurrency).await;
    scorer.store().flush().await?;
    let versions = read
        .each_ref()
        .map(|r| r.as_ref().map(|r| r.rubric.version.clone()));
    let report = build_report(&args.file, compare, &specs, &versions, &groups, &outcomes);

    let doc = match args.format {
        DiffFormat::Text => text::render(&report),
        DiffFormat::Json => {
            let mut doc = serde_json::to_string_pretty(&report)
                .map_err(|e| CliError::Other(format!("cannot serialise the report: {e}")))?;
            doc.push('\n');
            doc
        }
        DiffFormat::Html => page(&report)?,
    };
    let write = |path: &std::path::Path, doc: String| write_text(path, &doc).map_err(CliError::Io);
    match &args.output {
        Some(path) => write(path, doc)?,
        None => print!("{doc}"),
    }
    if let Some(path) = &args.html {
        write(path, page(&report)?)?;
    }
    let written: Vec<&PathBuf> = args.output.iter().chain(&args.html).collect();
    eprintln!("{}", text::summary_line(&report, &written));
    Ok(Exit::failed_if(report.failed() > 0))
}

/// The HTML page; a failure is a bug in its template, reported rather than written blank.
fn page(report: &Report) -> Result<String, CliError> {
    html::render(report)
        .map_err(|e| CliError::Other(format!("cannot render the HTML report: {e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn sides_need_exactly_one_pair() {
        let (c, [a, b]) = sides(&s(&["x", "y"]), &s(&["j"])).unwrap();
        assert_eq!(c, Compare::Rubric);
        assert_eq!(a.rubric.as_deref(), Some("x"));
        assert_eq!(b.rubric.as_deref(), Some("y"));
        assert_eq!(a.judge.as_deref(), Some("j"));
        assert_eq!(b.judge.as_deref(), Some("j"));
        let (c, [a, b]) = sides(&[], &s(&["p", "q"])).unwrap();
        assert_eq!(c, Compare::Judge);
        assert_eq!((a.rubric, b.rubric), (None, None));
        assert_eq!(b.judge.as_deref(), Some("q"));
        for (r, j) in [
            (s(&["x"]), s(&[])),
            (s(&[]), s(&[])),
            (s(&["x"]), s(&["j"])),
            (s(&["x", "y"]), s(&["p", "q"])),
            (s(&["x", "y", "z"]), s(&[])),
        ] {
            let e = sides(&r, &j).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
