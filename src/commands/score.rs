//! `gavel score`: one JSON result per group on stdout, one `FILE[:LINE]: error` line per failed
//! group on stderr (exit 1); a file problem is exit 2 with nothing scored.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use gavel::cli::{open_scorer, Common};
use gavel::groupfile::print_problems;

use super::{read_overridden, Overrides};

#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    overrides: Overrides,
    /// The group file.
    file: PathBuf,
}

pub async fn run(common: Common, args: ScoreArgs) -> anyhow::Result<ExitCode> {
    let cfg = common.load_config()?;
    let groups = match read_overridden(&args.file, cfg.server.max_group_size, &args.overrides) {
        Ok(g) => g,
        Err(problems) => return Ok(ExitCode::from(print_problems(&problems))),
    };
    let scorer = open_scorer(&cfg).await?;
    let mut failed = 0usize;
    for g in groups {
        match scorer.score_group(&g.request).await {
            Ok(resp) => {
                let mut v = serde_json::to_value(&resp)?;
                if let (Some(l), Some(o)) = (g.line, v.as_object_mut()) {
                    o.insert("line".into(), l.into());
                }
                println!("{v}");
            }
            Err(e) => {
                failed += 1;
                eprintln!("{}: {e}", g.at);
            }
        }
    }
    scorer.store().flush().await?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
