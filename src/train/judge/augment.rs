//! `gavel train judge --augment attacks`: attacked copies of the training groups, so that the
//! adapter learns that an answer which talks to the grader, pads itself or vouches for itself is
//! as wrong as it was ([`crate::domain::attack`]). Only labelled training groups get copies:
//! never the dev split, a teacher's groups or any eval row.

use std::path::PathBuf;

use crate::domain::attack::{attack_group, AttackSet};
use crate::score::Scorer;
use crate::train::TrainError;

use super::examples::ExampleSource;

/// What `--augment attacks` asked for.
#[derive(Debug, Clone, Default)]
pub struct Augment {
    /// Attacks by name; empty: every attack known.
    pub attacks: Vec<String>,
    /// A folder of more attack files.
    pub dir: Option<PathBuf>,
    /// Attacked copies per training group, the attacks taken in turn across groups.
    pub copies: usize,
}

/// `sources` followed by `copies` attacked copies of each labelled one: copy c of group k
/// under attack (k · copies + c) mod (number of attacks), so every attack is used about equally
/// and the run is the same every time. A copy keeps its group's labels.
pub fn with_attacks(
    sources: Vec<ExampleSource>,
    augment: &Augment,
    scorer: &Scorer,
) -> Result<Vec<ExampleSource>, TrainError> {
    let input = |m: String| TrainError::Input(format!("--augment attacks: {m}"));
    let set = AttackSet::load(augment.dir.as_deref()).map_err(|e| input(e.to_string()))?;
    let names: Vec<String> = set
        .chosen(&augment.attacks)
        .map_err(|e| input(e.to_string()))?
        .into_iter()
        .map(|a| a.name)
        .collect();
    let mut copies = Vec::new();
    for (k, src) in sources.iter().filter(|s| !s.soft).enumerate() {
        let rubric = scorer
            .rubric(&src.request.rubric)
            .map_err(|e| input(format!("{}: {e}", src.at)))?;
        for c in 0..augment.copies {
            let name = &names[(k * augment.copies + c) % names.len()];
            let trajectories = attack_group(
                &set,
                name,
                &src.request.trajectories,
                &src.per_trajectory,
                src.request.reference.as_deref(),
                &rubric,
                &src.at,
            )
            .map_err(|e| input(e.to_string()))?;
            let mut request = src.request.clone();
            request.trajectories = trajectories;
            copies.push(ExampleSource {
                at: format!("{} ({name})", src.at),
                file: src.file.clone(),
                request,
                per_trajectory: src.per_trajectory.clone(),
                soft: false,
            });
        }
    }
    let mut out = sources;
    out.extend(copies);
    Ok(out)
}
