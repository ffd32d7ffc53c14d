//! `gavel score`: one JSON result per group on stdout, one `FILE[:LINE]: error` line per failed
//! group on stderr (exit 1); a file problem is exit 2 with nothing scored.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use gavel::cli::{attach_store, build_scorer};

use super::Common;

use super::{read_overridden, Overrides};

#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    overrides: Overrides,
    /// The group file (`-`: standard input).
    file: PathBuf,
}

pub async fn run(common: Common, args: ScoreArgs) -> anyhow::Result<ExitCode> {
    let cfg = common.load_config()?;
    let scorer = build_scorer(&cfg)?;
    let groups = match read_overridden("score", &args.file, &scorer, &args.overrides) {
        Ok(g) => g,
        Err(e) => return Ok(super::exit(e)),
    };
    // Only now, with every group checked, is the store opened (or created).
    let scorer = attach_store(scorer, &cfg).await?;
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
