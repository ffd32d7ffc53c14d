//! `gavel render`: the exact judge messages and token counts of each group, no judge call.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use gavel::cli::build_scorer;

use super::Common;
use gavel::toolkit::groupfile::print_problems;

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
    /// The group file (`-`: standard input).
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
                println!("{v}");
            }
            Format::Text => {
                println!("=== group {} ({at}) ===", n + 1);
                for m in &r.messages {
                    println!("--- {} ---\n{}", m.role, m.content);
                }
                let pct = if r.prompt_tokens_without_dedup > 0 {
                    100.0 * r.tokens_saved_by_dedup as f64 / r.prompt_tokens_without_dedup as f64
                } else {
                    0.0
                };
                println!(
                    "--- tokens: {} (without dedup {}, saved {} = {pct:.0}%) · shared prefix {} · {} · {}",
                    r.prompt_tokens,
                    r.prompt_tokens_without_dedup,
                    r.tokens_saved_by_dedup,
                    count(r.shared_prefix_messages, "message", "messages"),
                    count(r.shared_blocks, "shared block", "shared blocks"),
                    count(r.distinct_trajectories, "distinct trajectory", "distinct trajectories"),
                );
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
                    println!("--- cascade: {}", plan.join(" → "));
                }
                if let Some(n) = r.prompts_asked {
                    // The messages above are the first prompt of the mode's n.
                    println!(
                        "--- {} asks {}: {} tokens in all, {} after a server's prefix cache",
                        r.template.name,
                        count(n, "prompt", "prompts"),
                        r.prompt_tokens_asked,
                        r.prompt_tokens_after_prefix_cache,
                    );
                }
                println!(
                    "--- rubric {} {} · template {} {}",
                    r.rubric.name, r.rubric.version, r.template.name, r.template.version
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `1 shared block`, `2 shared blocks`: the plural only for more than one.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
