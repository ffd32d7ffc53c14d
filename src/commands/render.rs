//! `gavel render`: the exact judge messages and token counts of each group, no judge call.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, ValueEnum};

use gavel::cli::Common;
use gavel::groupfile::print_problems;
use gavel::score::Scorer;
use gavel::store::{SledStore, VerdictStore};

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
    /// The group file.
    file: PathBuf,
}

pub async fn run(common: Common, args: RenderArgs) -> anyhow::Result<ExitCode> {
    let cfg = common.load_config()?;
    let groups = match read_overridden(&args.file, cfg.server.max_group_size, &args.overrides) {
        Ok(g) => g,
        Err(problems) => return Ok(ExitCode::from(print_problems(&problems))),
    };
    // Rendering needs no store; an in-memory sled keeps the scorer's shape without touching disk.
    let store: Arc<dyn VerdictStore> = Arc::new(SledStore::temporary()?);
    let scorer = Scorer::new(cfg.scorer_parts(), store)?;
    for (n, g) in groups.iter().enumerate() {
        let at = &g.at;
        let r = match scorer.render(&g.request) {
            Ok(r) => r,
            Err(e) => return Ok(ExitCode::from(print_problems(&[format!("{at}: {e}")]))),
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
                    "--- tokens: {} (without dedup {}, saved {} = {pct:.0}%) · shared prefix {} messages · {} shared blocks · {} distinct trajectories",
                    r.prompt_tokens,
                    r.prompt_tokens_without_dedup,
                    r.tokens_saved_by_dedup,
                    r.shared_prefix_messages,
                    r.shared_blocks,
                    r.distinct_trajectories
                );
                println!(
                    "--- rubric {} {} · template {} {}",
                    r.rubric.name, r.rubric.version, r.template.name, r.template.version
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
