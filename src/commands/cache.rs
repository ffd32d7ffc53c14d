//! `gavel cache stats|clear`: the verdict store, inspected or emptied. Neither creates a sled
//! store that is not there, and `clear` asks first (or needs `--yes`).

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;

use super::Common;
use gavel::store::{SledStore, StoreStats, VerdictStore};

#[derive(Subcommand)]
pub enum CacheAction {
    /// Print the number of verdicts and the size of the store.
    Stats,
    /// Remove every verdict. On a terminal it asks first; otherwise it needs --yes.
    Clear {
        /// Clear without asking (needed when standard input is not a terminal).
        #[arg(short, long, env = "GAVEL_CACHE_CLEAR_YES", default_value_t = false)]
        yes: bool,
    },
}

pub async fn run(common: Common, action: CacheAction) -> anyhow::Result<ExitCode> {
    let cfg = common.load_config()?;
    let place = cfg.store.describe();
    // A sled store is opened only if it exists: looking must not create one.
    let store: Option<Arc<dyn VerdictStore>> = match &cfg.store.url {
        Some(_) => Some(gavel::store::open(&cfg.store).await?),
        None => SledStore::open_existing(&cfg.store.path)?.map(|s| Arc::new(s) as _),
    };
    match action {
        CacheAction::Stats => {
            let stats = match &store {
                Some(s) => s.stats().await?,
                None => {
                    eprintln!(
                        "gavel cache: no store at {place} yet (nothing cached); none created"
                    );
                    StoreStats {
                        backend: "sled",
                        location: place,
                        verdicts: 0,
                        size_on_disk_bytes: 0,
                    }
                }
            };
            println!("{}", serde_json::to_string(&stats)?);
        }
        CacheAction::Clear { yes } => {
            let Some(store) = store else {
                println!("nothing to clear: no store at {place}");
                return Ok(ExitCode::SUCCESS);
            };
            if !yes {
                let stdin = std::io::stdin();
                if !stdin.is_terminal() {
                    eprintln!(
                        "gavel cache clear: refusing to clear {place} without --yes (standard \
                         input is not a terminal to ask on); nothing cleared"
                    );
                    return Ok(ExitCode::from(2));
                }
                let n = store.stats().await?.verdicts;
                eprint!("clear {n} verdicts from {place}? [y/N] ");
                std::io::stderr().flush()?;
                let mut answer = String::new();
                stdin.lock().read_line(&mut answer)?;
                if !confirmed(&answer) {
                    eprintln!("gavel cache clear: nothing cleared");
                    return Ok(ExitCode::from(1));
                }
            }
            let n = store.clear().await?;
            println!("cleared {n} verdicts from {place}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `y` or `yes`, in any case; anything else (an empty line too) keeps the verdicts.
fn confirmed(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::confirmed;

    #[test]
    fn only_yes_confirms() {
        for a in ["y\n", "Y", " yes \n", "YES"] {
            assert!(confirmed(a), "{a:?}");
        }
        for a in ["", "\n", "n", "no", "yess", "sure", "y y"] {
            assert!(!confirmed(a), "{a:?}");
        }
    }
}
