//! `gavel eval --attacks`: the attacked copies of every labelled group, and the size of the run
//! said (and, above a bound, agreed to) before any judge is asked.
//!
//! Each attack ([`crate::domain::attack`]) rewrites the final answer of the trajectories labelled
//! below their group's best; the best ones are left as they are. An attacked copy is judged like
//! any group (same pipeline, same cache, same orders), right after its clean group, so a local
//! judge finds their shared prefix in its cache.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use crate::cli::CliError;
use crate::domain::attack::{attack_group, Attack, AttackSet};
use crate::domain::trajectory::Trajectory;
use crate::score::Scorer;
use crate::toolkit::groupfile::{override_request, GroupIn};

use super::{Labels, Variant};

/// What `--attacks` asked for.
#[derive(Debug, Clone, Default)]
pub struct AttackOptions {
    /// Attacks by name; empty: every attack known.
    pub names: Vec<String>,
    /// A folder of more attack files (`*.toml`).
    pub dir: Option<PathBuf>,
    /// Run without asking, whatever the size.
    pub yes: bool,
    /// Most judgings run without asking.
    pub confirm_above: u64,
}

/// The attacks of a run and every attacked copy: `trajectories[group][combo][attack]`.
pub struct Attacked {
    pub attacks: Vec<Attack>,
    pub trajectories: Vec<Vec<Vec<Vec<Trajectory>>>>,
}

impl Attacked {
    pub fn none() -> Attacked {
        Attacked {
            attacks: Vec::new(),
            trajectories: Vec::new(),
        }
    }

    /// The trajectories of group `gi` (`g`) under combination `combo`: as labelled, or `attack`'s
    /// copy.
    pub fn of<'a>(
        &'a self,
        g: &'a GroupIn<Labels>,
        gi: usize,
        combo: usize,
        attack: Option<usize>,
    ) -> &'a [Trajectory] {
        match attack {
            None => &g.request.trajectories,
            Some(a) => &self.trajectories[gi][combo][a],
        }
    }
}

/// Loads the attacks asked for and applies each to every group under every combination (whose
/// rubric gives the standards an attack may quote). A usage or file problem is `Err(message)`.
pub(crate) fn prepare(
    opts: &AttackOptions,
    scorer: &Scorer,
    combos: &[Variant],
    groups: &[&GroupIn<Labels>],
) -> Result<Attacked, String> {
    let set = AttackSet::load(opts.dir.as_deref()).map_err(|e| e.to_string())?;
    let attacks = set
        .chosen(&opts.names)
        .map_err(|e| format!("--attacks: {e}"))?;
    let mut all = Vec::with_capacity(groups.len());
    for g in groups {
        let mut per_combo = Vec::with_capacity(combos.len());
        for v in combos {
            let mut req = g.request.clone();
            override_request(&mut req, v.rubric.as_ref(), None);
            let rubric = scorer.rubric(&req.rubric).map_err(|e| e.to_string())?;
            let copies = attacks
                .iter()
                .map(|a| {
                    attack_group(
                        &set,
                        &a.name,
                        &g.request.trajectories,
                        &g.extra.labels,
                        g.request.reference.as_deref(),
                        &rubric,
                        &g.at,
                    )
                    .map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, String>>()?;
            per_combo.push(copies);
        }
        all.push(per_combo);
    }
    Ok(Attacked {
        attacks,
        trajectories: all,
    })
}

/// Says how many judgings the run asks for and about how many prompt tokens, and asks before a
/// run above the bound: on a terminal, a yes/no question; elsewhere, a refusal naming `--yes`.
/// `Ok(false)`: not agreed to (the message is printed).
pub fn agree_to_size(
    opts: &AttackOptions,
    judgings: u64,
    clean: u64,
    prompt_tokens: u64,
    remote: bool,
) -> Result<bool, CliError> {
    let tokens = if remote {
        format!(", about {} prompt tokens", thousands(prompt_tokens))
    } else {
        format!(
            " ({} prompt tokens, most from a cached prefix)",
            thousands(prompt_tokens)
        )
    };
    eprintln!(
        "gavel eval: {} judgings ({} clean, {} attacked){tokens}",
        thousands(judgings),
        thousands(clean),
        thousands(judgings - clean)
    );
    if opts.yes || judgings <= opts.confirm_above {
        return Ok(true);
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        eprintln!(
            "gavel eval: {} judgings is more than --confirm-above {}: pass --yes to run them \
             (or choose fewer with --attacks=NAME,NAME or --limit)",
            thousands(judgings),
            thousands(opts.confirm_above)
        );
        return Ok(false);
    }
    eprint!("Run them? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .map_err(|e| CliError::Io(format!("standard input: {e}")))?;
    let yes = matches!(line.trim(), "y" | "Y" | "yes" | "Yes");
    if !yes {
        eprintln!("gavel eval: nothing judged");
    }
    Ok(yes)
}

/// The prompt tokens one request costs in one order: its first prompt's tokens times the
/// prompts its mode asks (0 when it cannot be rendered: its error comes when it is judged).
pub fn prompt_tokens(scorer: &Scorer, req: &crate::score::ScoreRequest) -> u64 {
    scorer.render(req).map_or(0, |r| {
        r.prompt_tokens
            * r.prompts_asked.unwrap_or(1) as u64
            * u64::from(req.permutations.unwrap_or(1))
    })
}

/// `12,345`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_grouped() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(1234567), "1,234,567");
    }
}
