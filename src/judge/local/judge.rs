//! The local judge as a judge backend (`backend = "local"` in `[judges.NAME]`): loads the model
//! at start-up (any problem fails the start, in one line), serves it through an [`Engine`], and
//! turns each judge call into a [`Completion`] like a remote judge's.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::engine::Engine;
use super::request::{EngineError, EngineSettings, ReadRequest, Request};
use crate::domain::prompt::ChatMessage;
use crate::judge::config::LocalConfig;
use crate::judge::{
    cut_text, ChoiceProbabilities, Completion, Judge, JudgeAdapter, JudgeError, JudgeFailure,
    JudgeInfo, JudgeSettings, ProbabilityJudge, StructuredOutput,
};
use crate::model::adapter::{AdapterInfo, Reach};
use crate::model::{LocalError, ModelInfo};

#[derive(Debug)]
pub struct LocalJudge {
    pub name: String,
    /// The reported model name: `model` from the config, else the model's own name.
    pub model: String,
    /// The model's thread, shared with every judge on the same model (`LocalJudge::new` and
    /// `load_local_judges` in the `shared` module build judges).
    engine: Engine,
    /// The adapter this judge runs on the engine's model: its slot there, and what it is.
    adapter: Option<(usize, AdapterInfo)>,
    /// How its engine generates and queues (judges with equal ones share an engine).
    engine_settings: EngineSettings,
    device: String,
    /// What the scorer plans with: its context window is always known (the model's, or less).
    settings: JudgeSettings,
}

impl LocalJudge {
    /// The judge `cfg` configures, served by `engine` (whose model it names), running the
    /// adapter attached there in the slot given, or none. Refuses an adapter trained for
    /// another mode than the judge's.
    pub(super) fn on_engine(
        name: &str,
        cfg: &LocalConfig,
        engine: Engine,
        adapter: Option<(usize, AdapterInfo)>,
    ) -> Result<LocalJudge, LocalError> {
        let info = engine.info().clone();
        let mode = cfg.effective_mode();
        if let Some((_, a)) = adapter.as_ref().filter(|(_, a)| !a.modes.is_empty()) {
            if !a.modes.iter().any(|m| m == mode.name()) {
                return Err(LocalError::invalid(
                    &a.path,
                    format!(
                        "this adapter was trained for mode {}, and [judges.{name}] judges in \
                         mode {}: set mode to one it was trained for",
                        a.modes.join(", "),
                        mode.name()
                    ),
                ));
            }
        }
        let model_name = if cfg.common.model.trim().is_empty() {
            display_name(&info)
        } else {
            cfg.common.model.clone()
        };
        let described = adapter.as_ref().map(|(_, a)| JudgeAdapter {
            path: a.path.display().to_string(),
            sha256: a.sha256.clone(),
            reach: match a.reach {
                Reach::All => "all",
                Reach::Verdict => "verdict",
            },
        });
        let judge_info = JudgeInfo {
            name: name.to_string(),
            model: model_name.clone(),
        };
        Ok(LocalJudge {
            name: name.to_string(),
            model: model_name,
            engine,
            adapter,
            engine_settings: engine_settings(cfg),
            device: cfg.device.to_string(),
            settings: JudgeSettings {
                context_tokens: Some(
                    cfg.common
                        .context_tokens
                        .map_or(info.context_length, |c| c.min(info.context_length)),
                ),
                pairwise_opponents: cfg.pairwise_opponents,
                // An explanation cut to no bytes at all is not asked for.
                explains: cfg.explain && cfg.max_explanation_bytes > 0,
                adapter: described,
                ..JudgeSettings::from_common(judge_info, &cfg.common, mode)
            },
        })
    }

    /// The adapter this judge runs: what it is (its slot on the engine's model aside).
    pub fn adapter_info(&self) -> Option<&AdapterInfo> {
        self.adapter.as_ref().map(|(_, a)| a)
    }

    fn adapter_slot(&self) -> Option<usize> {
        self.adapter.as_ref().map(|(slot, _)| *slot)
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether listwise replies are decoded under the reply's JSON grammar.
    pub fn constrained(&self) -> bool {
        self.engine_settings.constrained
    }

    /// Runs `request` on the engine as one completion.
    async fn generate(&self, request: Request) -> Result<Completion, JudgeError> {
        let mut c = self.generate_many(vec![request]).await?;
        Ok(c.pop().expect("one request, one completion"))
    }

    /// Runs `requests` on the engine as one job: decoded together, answered together.
    async fn generate_many(&self, requests: Vec<Request>) -> Result<Vec<Completion>, JudgeError> {
        let generated = self
            .engine
            .generate_many(requests)
            .await
            .map_err(|e| self.error(e))?;
        Ok(generated
            .into_iter()
            .map(|g| {
                tracing::debug!(judge = %self.name, prompt_tokens = g.prompt_tokens,
                    cached_prompt_tokens = g.cached_prompt_tokens,
                    completion_tokens = g.completion_tokens, queued_s = g.queued.as_secs_f64(),
                    prefill_s = g.prefill.as_secs_f64(), decode_s = g.decode.as_secs_f64(),
                    "local judge call");
                Completion {
                    text: g.text,
                    prompt_tokens: g.prompt_tokens,
                    completion_tokens: g.completion_tokens,
                    cached_prompt_tokens: g.cached_prompt_tokens,
                    forward_passes: g.forward_passes,
                    attempts: 1,
                    retries: Default::default(),
                }
            })
            .collect())
    }

    fn error(&self, e: EngineError) -> JudgeError {
        let m = format!("judge {:?}: {e}", self.name);
        match e {
            EngineError::Overloaded(_) => JudgeError::Overloaded(m),
            EngineError::Cancelled => JudgeError::Timeout(m),
            EngineError::TooLong { .. }
            | EngineError::Stopped
            | EngineError::Panicked
            | EngineError::Local(_) => JudgeError::Unavailable(m),
        }
    }
}

#[async_trait]
impl Judge for LocalJudge {
    /// What decides this judge's verdicts: the weights (by file name, size, format, type), the
    /// device, the sampling and constraint settings, and the adapter's files (by their hash).
    /// The path's folder is not in it, so a moved model keeps its cached verdicts.
    fn identity(&self) -> Value {
        let info = self.engine.info();
        let file = info
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned());
        let mut id = json!({
            "backend": "local",
            "model": self.model,
            "file": file,
            "weight_bytes": info.weight_bytes,
            "format": info.format,
            "arch": info.arch,
            "dtype": info.dtype,
            "device": self.device,
            "constrained": self.engine_settings.constrained,
            "max_explanation_bytes": self.engine_settings.max_explanation_bytes,
            "max_tokens": self.engine_settings.max_tokens,
            "expected_score": self.engine_settings.expected_score,
            "temperature": self.engine_settings.temperature,
            "seed": self.engine_settings.seed,
        });
        // Only when there is one: a judge without an adapter keeps the keys it always had.
        if let Some(a) = self.adapter_info() {
            id["adapter"] = json!(a.sha256);
        }
        id
    }

    fn settings(&self) -> &JudgeSettings {
        &self.settings
    }

    fn structured_output(&self) -> StructuredOutput {
        // Constrained decoding holds the reply to the schema itself, as `json_schema` does.
        if self.constrained() {
            StructuredOutput::JsonSchema
        } else {
            StructuredOutput::Off
        }
    }

    fn probabilities(&self) -> Option<&dyn ProbabilityJudge> {
        Some(self)
    }

    // The model was loaded (or start-up failed) before the daemon listened; its owner thread
    // answers or refuses with 429 from then on, unless it stopped after repeated panics.
    async fn probe(&self) -> Result<(), String> {
        self.engine
            .health()
            .map_err(|why| format!("judge {:?}: {why}", self.name))
    }

    /// One completion. `schema` is [`crate::domain::verdict::verdict_schema`]'s: the trajectory ids and
    /// checklist item ids the constrained output follows are read from it.
    async fn complete(
        &self,
        messages: &[ChatMessage],
        schema: &Value,
    ) -> Result<Completion, JudgeFailure> {
        let (ids, items) = schema_ids(schema);
        let request = Request {
            messages: messages.to_vec(),
            ids,
            items,
            free_text_bytes: None,
            adapter: self.adapter_slot(),
        };
        Ok(self.generate(request).await?)
    }

    /// The base model's own answer (no adapter: the adapter is trained to give verdicts),
    /// decoded as free text up to `max_reference_bytes`.
    async fn answer(&self, messages: &[ChatMessage]) -> Result<Completion, JudgeFailure> {
        let max_bytes = self.settings.max_reference_bytes;
        let mut completion = self
            .generate(Request {
                messages: messages.to_vec(),
                ids: Vec::new(),
                items: Vec::new(),
                free_text_bytes: Some(max_bytes),
                adapter: None,
            })
            .await?;
        completion.text = cut_text(&completion.text, max_bytes);
        Ok(completion)
    }
}

#[async_trait]
impl ProbabilityJudge for LocalJudge {
    /// Each choice's probability as the first token of the answer to each prompt (no
    /// decoding): one engine job for all of them, so a group's prompts share their prefix.
    async fn choice_probabilities(
        &self,
        prompts: Vec<Vec<ChatMessage>>,
        choices: &[Vec<String>],
    ) -> Result<Vec<ChoiceProbabilities>, JudgeFailure> {
        let readings = self
            .engine
            .read(ReadRequest {
                prompts,
                choices: choices.to_vec(),
                adapter: self.adapter_slot(),
            })
            .await
            .map_err(|e| self.error(e))?;
        Ok(readings
            .into_iter()
            .map(|p| {
                tracing::debug!(judge = %self.name, prompt_tokens = p.prompt_tokens,
                    cached_prompt_tokens = p.cached_prompt_tokens, coverage = p.coverage,
                    queued_s = p.queued.as_secs_f64(), prefill_s = p.prefill.as_secs_f64(),
                    "local judge reading");
                ChoiceProbabilities {
                    shares: p.shares,
                    coverage: p.coverage,
                    prompt_tokens: p.prompt_tokens,
                    cached_prompt_tokens: p.cached_prompt_tokens,
                    forward_passes: p.forward_passes,
                }
            })
            .collect())
    }

    /// Short free-text answers to each of `prompts`, each cut to `max_explanation_bytes` (at a
    /// character boundary): the explanations of scores already read in a probability mode, a
    /// group's decoded together.
    async fn explain(&self, prompts: Vec<Vec<ChatMessage>>) -> Result<Vec<Completion>, JudgeError> {
        let max_bytes = self.engine_settings.max_explanation_bytes;
        let requests = prompts
            .into_iter()
            .map(|messages| Request {
                messages,
                ids: Vec::new(),
                items: Vec::new(),
                free_text_bytes: Some(max_bytes),
                adapter: self.adapter_slot(),
            })
            .collect();
        let mut completions = self.generate_many(requests).await?;
        for c in &mut completions {
            c.text = cut_text(&c.text, max_bytes);
        }
        Ok(completions)
    }
}

/// How `cfg`'s judge wants its engine to generate and queue: judges whose settings are equal
/// can share one engine.
pub(super) fn engine_settings(cfg: &LocalConfig) -> EngineSettings {
    EngineSettings {
        max_queue: cfg.max_queue,
        constrained: cfg.common.structured_output != StructuredOutput::Off,
        max_explanation_bytes: cfg.max_explanation_bytes,
        max_tokens: cfg.common.max_tokens as usize,
        expected_score: cfg.expected_score,
        temperature: f64::from(cfg.common.temperature),
        seed: cfg.seed,
        prefix_cache_bytes: cfg.prefix_cache_bytes,
        max_batch_tokens: cfg.max_batch_tokens,
        max_decode_batch: cfg.max_decode_batch,
    }
}

/// `general.name` / `_name_or_path`, else the file or folder name.
fn display_name(info: &ModelInfo) -> String {
    info.name.clone().unwrap_or_else(|| {
        info.path.file_name().map_or_else(
            || info.path.display().to_string(),
            |f| f.to_string_lossy().into_owned(),
        )
    })
}

/// The trajectory ids and checklist item ids of a verdict schema.
fn schema_ids(schema: &Value) -> (Vec<String>, Vec<String>) {
    let entry = &schema["properties"]["scores"]["items"]["properties"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    (
        strings(&entry["trajectory_id"]["enum"]),
        strings(&entry["items"]["items"]["properties"]["id"]["enum"]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::verdict::verdict_schema;

    #[test]
    fn ids_and_items_come_from_the_verdict_schema() {
        let ids = vec!["2".to_string(), "1".to_string()];
        let items = vec!["cites".to_string(), "no_tools".to_string()];
        assert_eq!(
            schema_ids(&verdict_schema(&ids, &items)),
            (ids.clone(), items)
        );
        assert_eq!(schema_ids(&verdict_schema(&ids, &[])), (ids, vec![]));
    }
}
