//! Local judges on one model share it. Judges whose tables name the same `model_path` and
//! `device`, with the same engine settings, get one loaded model, one owner thread and one prefix
//! cache; each judge's adapter is attached to that model in a slot of its own (a low-rank side
//! path, see [`crate::model::infer`]) and chosen per request. A base judge and its tuned judges
//! then cost the memory of one model, and, since a verdict adapter leaves every position but the
//! verdict's to the base model, reuse each other's cached prefixes: in the paired comparison
//! `gavel eval --judge base --judge tuned`, with both judges in one mode, the tuned judge
//! prefills only each prompt's last tokens.

use std::time::Instant;

use super::engine::Engine;
use super::judge::{engine_settings, LocalJudge};
use super::model::{LoadedModel, LocalModelSpec};
use crate::judge::config::LocalConfig;
use crate::model::LocalError;

impl LocalJudge {
    /// Loads the model `cfg.model_path` names on `cfg.device` (with `cfg.adapter`) and starts
    /// its thread: one judge alone. [`load_local_judges`] loads several, sharing what they can.
    /// (Here, beside it, so the judge's own module need not know how judges share a model.)
    pub fn new(name: &str, cfg: &LocalConfig) -> Result<LocalJudge, LocalError> {
        let mut judges = load_local_judges(&[(name, cfg)]).map_err(|(_, e)| e)?;
        Ok(judges.pop().expect("one judge asked, one built").1)
    }
}

/// Builds the local judges `judges` configures, loading each model once for every judge that
/// can share it. On a problem, the judges involved (`[judges.a]`, or `[judges.a], [judges.b]`
/// when they share the model) and the error.
pub fn load_local_judges(
    judges: &[(&str, &LocalConfig)],
) -> Result<Vec<(String, LocalJudge)>, (String, LocalError)> {
    let mut groups: Vec<Vec<(&str, &LocalConfig)>> = Vec::new();
    for &(name, cfg) in judges {
        match groups.iter_mut().find(|g| shares_model(g[0].1, cfg)) {
            Some(g) => g.push((name, cfg)),
            None => groups.push(vec![(name, cfg)]),
        }
    }
    let mut built = Vec::with_capacity(judges.len());
    for group in groups {
        let tables = group
            .iter()
            .map(|(name, _)| format!("[judges.{name}]"))
            .collect::<Vec<_>>()
            .join(", ");
        let first = group[0].1;
        // One slot per distinct adapter folder: two judges with the same adapter run the same.
        let mut spec = LocalModelSpec::new(first.model_path.clone(), first.device.to_string());
        for (_, cfg) in &group {
            if let Some(dir) = cfg.adapter.as_ref().filter(|d| !spec.adapters.contains(d)) {
                spec.adapters.push(dir.clone());
            }
        }
        let started = Instant::now();
        let model = LoadedModel::load(&spec).map_err(|e| (tables.clone(), e))?;
        let info = model.info();
        let names: Vec<&str> = group.iter().map(|(name, _)| *name).collect();
        tracing::info!(judges = ?names, model = info.name.as_deref().unwrap_or("unnamed"), arch = ?info.arch, format = ?info.format,
            dtype = %info.dtype, device = %info.device, template = ?model.chat_template().origin(),
            adapters = spec.adapters.len(), load_s = started.elapsed().as_secs_f64(),
            "local judge model loaded");
        let adapters: Vec<_> = (0..spec.adapters.len())
            .map(|slot| model.adapter(slot).cloned().expect("attached"))
            .collect();
        let engine =
            Engine::start(model, engine_settings(first)).map_err(|e| (tables.clone(), e))?;
        for (name, cfg) in group {
            let adapter = cfg.adapter.as_ref().map(|dir| {
                let slot = spec
                    .adapters
                    .iter()
                    .position(|d| d == dir)
                    .expect("attached");
                (slot, adapters[slot].clone())
            });
            let judge = LocalJudge::on_engine(name, cfg, engine.clone(), adapter)
                .map_err(|e| (format!("[judges.{name}]"), e))?;
            built.push((name.to_string(), judge));
        }
    }
    Ok(built)
}

/// Whether the judges of `a` and `b` can run on one loaded model: the same model file (as
/// written), the same device, and the same engine settings (the engine generates and queues
/// for every judge on it alike). Their adapters and modes may differ.
fn shares_model(a: &LocalConfig, b: &LocalConfig) -> bool {
    a.model_path == b.model_path && a.device == b.device && engine_settings(a) == engine_settings(b)
}
