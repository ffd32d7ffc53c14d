//! `gavel render`: the exact judge messages and token counts of each group, no judge call.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use gavel::cli::build_scorer;
use gavel::score::RenderResponse;

use super::Common;
use gavel::toolkit::groupfile::print_problems;
use gavel::toolkit::output_file::LineSink;

use super::{read_overridden, Overrides};

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Args)]
pub struct RenderArgs {
    #[command(flatten)]
    overrides: Overrides,
    /// Output format.
    #[arg(long, env = "GAVEL_RENDER_FORMAT", value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the rendering here (missing folders are made) instead of standard output, and a
    /// one-line summary to stderr.
    #[arg(short = 'o', long = "output", env = "GAVEL_RENDER_OUTPUT")]
    output: Option<PathBuf>,
    /// The group file (`-`: standard input). Fields of a line beyond its `/v1/score_group`
    /// body (a labelled eval row's `id`, `labels`, `set`) are left aside, not refused.
    file: PathBuf,
}

pub async fn run(common: Common, args: RenderArgs) -> anyhow::Result<ExitCode> {
    let cfg = common.load_config()?;
    // Rendering needs no store: the built scorer's in-memory one never touches disk.
    let scorer = build_scorer(&cfg)?;
    let groups = match read_overridden("render", &args.file, &scorer, &args.overrides) {
        Ok(g) => g,
        Err(e) => return Ok(super::exit(e)),
    };
    let mut out = LineSink::new(args.output.as_deref());
    for (n, g) in groups.iter().enumerate() {
        let at = &g.at;
        let r = match scorer.render(&g.request) {
            Ok(r) => r,
            Err(e) => return Ok(super::exit(print_problems(&[format!("{at}: {e}")]))),
        };
        match args.format {
            Format::Json => {
                let mut v = serde_json::to_value(&r)?;
                if let (Some(l), Some(o)) = (g.line, v.as_object_mut()) {
                    o.insert("line".into(), l.into());
                }
                out.push(v.to_string());
            }
            Format::Text => out.push(text_block(n + 1, at, &r)),
        }
    }
    let groups = out.count();
    if let Some(path) = out.finish().map_err(anyhow::Error::msg)? {
        eprintln!(
            "gavel render: {} · wrote {}",
            count(groups, "group", "groups"),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Group `n`'s judge messages and the lines after them (tokens, cascade, prompts asked,
/// rubric and template), as one block of text without its final newline.
fn text_block(n: usize, at: &str, r: &RenderResponse) -> String {
    let mut t = format!("=== group {n} ({at}) ===");
    for m in &r.messages {
        t.push_str(&format!("\n--- {} ---\n{}", m.role, m.content));
    }
    let pct = if r.prompt_tokens_without_dedup > 0 {
        100.0 * r.tokens_saved_by_dedup as f64 / r.prompt_tokens_without_dedup as f64
    } else {
        0.0
    };
    t.push_str(&format!(
        "\n--- tokens: {} (without dedup {}, saved {} = {pct:.0}%) · shared prefix {} · {} · {}",
        r.prompt_tokens,
        r.prompt_tokens_without_dedup,
        r.tokens_saved_by_dedup,
        count(r.shared_prefix_messages, "message", "messages"),
        count(r.shared_blocks, "shared block", "shared blocks"),
        count(
            r.distinct_trajectories,
            "distinct trajectory",
            "distinct trajectories"
        ),
    ));
    if let Some(stages) = &r.cascade {
        // The messages above are the first stage's.
        let plan: Vec<String> = stages
            .iter()
            .map(|s| match s.threshold {
                Some(t) => format!(
                    "{} ({}, stands at confidence ≥ {t})",
                    s.judge,
                    s.mode.name()
                ),
                None => format!("{} ({}, decides the rest)", s.judge, s.mode.name()),
            })
            .collect();
        t.push_str(&format!("\n--- cascade: {}", plan.join(" → ")));
    }
    if let Some(n) = r.prompts_asked {
        // The messages above are the first prompt of the mode's n.
        t.push_str(&format!(
            "\n--- {} asks {}: {} tokens in all, {} after a server's prefix cache",
            r.template.name,
            count(n, "prompt", "prompts"),
            r.prompt_tokens_asked,
            r.prompt_tokens_after_prefix_cache,
        ));
    }
    t.push_str(&format!(
        "\n--- rubric {} {} · template {} {}",
        r.rubric.name, r.rubric.version, r.template.name, r.template.version
    ));
    t
}

/// `1 shared block`, `2 shared blocks`: the plural only for more than one.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
