//! A loaded local model: weights, tokenizer, byte vocabulary, EOS ids and chat template, with
//! the single-sequence forward pass that generation is built on.
//!
//! [`LoadedModel`] is `Send`, not `Sync`: it is meant to live on one owner thread that runs
//! every forward pass, holding the KV cache of one sequence at a time.

use std::path::PathBuf;

use candle_core::DType;
use tokenizers::Tokenizer;

use crate::domain::prompt::ChatMessage;
use crate::model::adapter::{Adapter, AdapterInfo, Reach};
use crate::model::error::one_line;
use crate::model::infer::{AdapterRows, KvState, Qwen};
use crate::model::{
    Arch, ChatTemplate, DeviceSpec, LoadedTokenizer, LocalError, ModelFiles, ModelInfo, OpenDevice,
    RenderOptions,
};

/// Where a local model comes from and where it runs: the judge's `model_path` and `device`,
/// with the LoRA adapters to attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalModelSpec {
    /// A GGUF file or a Hugging Face model folder.
    pub model_path: PathBuf,
    /// `cpu` or `cuda:N` (`cuda` is `cuda:0`).
    pub device: String,
    /// LoRA adapter folders (PEFT's layout), each run over the weights as a side path; the
    /// adapter in slot `i` is the `i`-th. Several judges share one loaded base this way.
    pub adapters: Vec<PathBuf>,
}

impl LocalModelSpec {
    pub fn new(model_path: impl Into<PathBuf>, device: impl Into<String>) -> LocalModelSpec {
        LocalModelSpec {
            model_path: model_path.into(),
            device: device.into(),
            adapters: Vec::new(),
        }
    }

    /// Adds `adapter`, when there is one, as the next slot.
    pub fn with_adapter(mut self, adapter: Option<PathBuf>) -> LocalModelSpec {
        self.adapters.extend(adapter);
        self
    }
}

/// A model ready to run: see the module docs.
pub struct LoadedModel {
    weights: Qwen,
    tok: LoadedTokenizer,
    template: ChatTemplate,
    info: ModelInfo,
    /// The attached adapters, by slot.
    adapters: Vec<AdapterInfo>,
    /// The adapter the next requests run, if any (see [`LoadedModel::select_adapter`]).
    selected: Option<usize>,
    /// Forward passes run so far (see [`LoadedModel::forward_passes`]).
    forwards: u64,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("info", &self.info)
            .field("cached", &self.weights.cached_len())
            .finish()
    }
}

impl LoadedModel {
    /// Loads and checks everything `spec` names; any problem is one [`LocalError`] line. The
    /// first adapter, if any, is selected.
    pub fn load(spec: &LocalModelSpec) -> Result<LoadedModel, LocalError> {
        LoadedModel::load_with_dtype(spec, None)
    }

    /// [`LoadedModel::load`] with the compute dtype of full-precision weights chosen (default:
    /// f32 on CPU, bf16 on a GPU); GGUF weights keep their own types.
    pub fn load_with_dtype(
        spec: &LocalModelSpec,
        dtype: Option<DType>,
    ) -> Result<LoadedModel, LocalError> {
        let device = DeviceSpec::parse(&spec.device)?.open()?;
        let files = ModelFiles::open(&spec.model_path)?;
        let dtype = files.compute_dtype(&device, dtype);
        let mut weights = Qwen::from_files(&files, dtype, &device)?;
        let info = files.info(&device, dtype);
        let mut adapters = Vec::new();
        for dir in &spec.adapters {
            let adapter = Adapter::read(dir)?;
            adapter.check_base(&files)?;
            let slot = weights
                .attach_adapter(&adapter)
                .map_err(|e| LocalError::invalid(dir, e))?;
            debug_assert_eq!(slot, adapters.len());
            adapters.push(adapter.info());
        }
        let mut model = LoadedModel {
            weights,
            tok: files.tokenizer,
            template: files.template,
            info,
            adapters,
            selected: None,
            forwards: 0,
        };
        model.select_adapter((!spec.adapters.is_empty()).then_some(0));
        Ok(model)
    }

    /// The adapter in `slot`, if one is attached there.
    pub fn adapter(&self, slot: usize) -> Option<&AdapterInfo> {
        self.adapters.get(slot)
    }

    /// The adapter the next requests run: one attached adapter (by slot) or none (the base
    /// model). An adapter for every position runs on every forward from now on; a verdict
    /// adapter only where [`LoadedModel::set_verdict_adapter`] turns it on. An unknown slot is
    /// the base model.
    pub fn select_adapter(&mut self, slot: Option<usize>) {
        self.selected = slot.filter(|&s| s < self.adapters.len());
        let rows = match self.selected {
            Some(s) if self.adapters[s].reach == Reach::All => AdapterRows::All(s),
            _ => AdapterRows::Off,
        };
        self.weights.set_adapter_rows(rows);
    }

    /// Which keys and values the next forwards write: the base model's (`None`, whatever verdict
    /// adapter is selected: it changes no position another prompt reuses) or those of the
    /// every-position adapter in this slot. Cached prefixes are only reused under the same.
    pub fn kv_flavour(&self) -> Option<usize> {
        match self.weights.adapter_rows() {
            AdapterRows::All(s) => Some(s),
            _ => None,
        }
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn arch(&self) -> Arch {
        self.info.arch
    }

    /// Length of every logits vector (the embedding's rows; may exceed the tokenizer's ids).
    pub fn vocab_size(&self) -> usize {
        self.info.vocab_size
    }

    /// Most positions (prompt plus completion) the model takes.
    pub fn context_length(&self) -> usize {
        self.info.context_length
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tok.tokenizer
    }

    /// Raw bytes per token id, [`LoadedModel::vocab_size`] long, empty for special, added and
    /// padding ids: the input of [`super::constrain::TokenMask::new`].
    pub fn vocab_bytes(&self) -> &[Vec<u8>] {
        &self.tok.vocab_bytes
    }

    /// Token ids that end a completion, sorted.
    pub fn eos_ids(&self) -> &[u32] {
        &self.tok.eos_ids
    }

    pub fn chat_template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Token ids of `text`. Special-token text in it (`<|im_start|>`) becomes the special
    /// token, as a rendered chat prompt needs; no BOS is added (Qwen has none).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LocalError> {
        self.tok.encode(text)
    }

    /// See [`LoadedTokenizer::choice_tokens`].
    pub fn choice_tokens(&self, choices: &[Vec<String>]) -> Result<Vec<Vec<u32>>, LocalError> {
        self.tok.choice_tokens(choices, self.info.vocab_size)
    }

    /// The text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, LocalError> {
        self.tok.decode(ids, false)
    }

    /// The judge prompt for `messages` in the model's chat template (assistant turn opened,
    /// thinking off), as token ids.
    pub fn prompt_tokens(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, LocalError> {
        self.prompt_tokens_with(messages, &RenderOptions::default())
    }

    pub fn prompt_tokens_with(
        &self,
        messages: &[ChatMessage],
        opts: &RenderOptions,
    ) -> Result<Vec<u32>, LocalError> {
        self.encode(&self.template.render_with(messages, opts)?)
    }

    /// Bytes one position of the KV cache takes (what a prefix cache entry costs a token).
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.weights.kv_bytes_per_token()
    }

    /// Positions the KV cache holds: the `pos` the next [`LoadedModel::forward_logits`] that
    /// continues the sequence must pass.
    pub fn cached_len(&self) -> usize {
        self.weights.cached_len()
    }

    /// Empties the KV cache (a new sequence starts at `pos` 0).
    pub fn clear_kv_cache(&mut self) {
        self.weights.clear_kv_cache();
    }

    /// A snapshot of the KV cache (cheap: its tensors are shared, and never written in place).
    pub(crate) fn kv_state(&self) -> KvState {
        self.weights.kv_state()
    }

    /// Puts a snapshot back, cut to its first `len` positions: the next forward continues at
    /// `pos` = `len` (or the snapshot's length, if shorter).
    pub(crate) fn restore_kv(&mut self, state: &KvState, len: usize) -> Result<(), LocalError> {
        self.weights
            .restore(state, len)
            .map_err(|e| LocalError::Forward(one_line(&e.to_string())))
    }

    /// See [`crate::model::infer::Qwen::set_dense_always`]: every forward on the same
    /// arithmetic, so a prompt's logits do not depend on how much of it the prefix cache
    /// supplied.
    pub fn set_dense_always(&mut self, on: bool) {
        self.weights.set_dense_always(on);
    }

    /// The selected verdict adapter (see [`Reach::Verdict`]) on the last position of the next
    /// forwards, or off; an adapter for every position is always on.
    pub fn set_verdict_adapter(&mut self, on: bool) {
        let Some(slot) = self.selected else { return };
        if self.adapters[slot].reach == Reach::Verdict {
            let rows = if on {
                AdapterRows::Last(slot)
            } else {
                AdapterRows::Off
            };
            self.weights.set_adapter_rows(rows);
        }
    }

    /// Whether the next forwards run a verdict adapter on their last position: its keys and
    /// values are then not the base model's, and must not be reused as context.
    pub fn verdict_adapter_on(&self) -> bool {
        matches!(self.weights.adapter_rows(), AdapterRows::Last(_))
    }

    /// Forward passes run since the model was loaded: the engine reports, per request, how many
    /// it took (a prefill is one pass however many tokens it has).
    pub fn forward_passes(&self) -> u64 {
        self.forwards
    }

    /// Runs `tokens` at positions `pos..pos + tokens.len()` and returns the logits after the
    /// last one ([`LoadedModel::vocab_size`] values, f32). `pos` 0 starts a new sequence (the
    /// KV cache is emptied); any other `pos` must equal [`LoadedModel::cached_len`], i.e.
    /// continue the cached sequence. After an error the cache is emptied.
    pub fn forward_logits(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, LocalError> {
        if tokens.is_empty() {
            return Err(LocalError::Forward(
                "forward_logits needs at least one token".into(),
            ));
        }
        if pos == 0 {
            self.clear_kv_cache();
        } else if pos != self.cached_len() {
            return Err(LocalError::Forward(format!(
                "forward at position {pos}, but the KV cache holds {} positions (start again at 0)",
                self.cached_len()
            )));
        }
        self.check_tokens(pos + tokens.len(), tokens)?;
        self.forwards += 1;
        let result = self
            .weights
            .forward(tokens)
            .and_then(|t| t.to_vec1::<f32>());
        match result {
            Ok(logits) if logits.len() == self.info.vocab_size => Ok(logits),
            Ok(logits) => {
                self.clear_kv_cache();
                Err(LocalError::Forward(format!(
                    "the model returned {} logits for a vocabulary of {}",
                    logits.len(),
                    self.info.vocab_size
                )))
            }
            Err(e) => {
                self.clear_kv_cache();
                Err(LocalError::Forward(one_line(&e.to_string())))
            }
        }
    }
}

impl LoadedModel {
    /// Errors when a forward would reach position `end` past the context, or run a token
    /// outside the vocabulary.
    fn check_tokens<'a>(
        &self,
        end: usize,
        tokens: impl IntoIterator<Item = &'a u32>,
    ) -> Result<(), LocalError> {
        if end > self.info.context_length {
            return Err(LocalError::Forward(format!(
                "{end} positions exceed the model's context of {}",
                self.info.context_length
            )));
        }
        if let Some(&bad) = tokens
            .into_iter()
            .find(|&&t| t as usize >= self.info.vocab_size)
        {
            return Err(LocalError::Forward(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.info.vocab_size
            )));
        }
        Ok(())
    }

    /// Runs each of `seqs` after its own KV snapshot in `states` (which it extends), in one
    /// forward (see [`crate::model::infer::Qwen::forward_batch`]), and returns the logits
    /// after each one's last token. The model's own cache is emptied.
    pub(crate) fn forward_batch(
        &mut self,
        seqs: &[&[u32]],
        states: &mut [KvState],
    ) -> Result<Vec<Vec<f32>>, LocalError> {
        for (seq, state) in seqs.iter().zip(states.iter()) {
            self.check_tokens(state.len() + seq.len(), seq.iter())?;
        }
        self.forwards += 1;
        // The model's cache is some other sequence's; nothing may continue it by mistake.
        self.clear_kv_cache();
        let logits = self
            .weights
            .forward_batch(seqs, states)
            .map_err(|e| LocalError::Forward(one_line(&e.to_string())))?;
        self.logit_rows(logits)
    }

    /// `[sequences, vocab]` logits as rows, checked against the vocabulary.
    fn logit_rows(&mut self, logits: candle_core::Tensor) -> Result<Vec<Vec<f32>>, LocalError> {
        let rows = logits.to_vec2::<f32>().map_err(|e| {
            self.clear_kv_cache();
            LocalError::Forward(one_line(&e.to_string()))
        })?;
        if rows.iter().any(|r| r.len() != self.info.vocab_size) {
            self.clear_kv_cache();
            return Err(LocalError::Forward(format!(
                "the model returned logits of another length than its vocabulary of {}",
                self.info.vocab_size
            )));
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bf16 weights continue a cached prefix with the logits of a full prefill (candle's own
    /// bf16 Qwen2 could not build that attention mask).
    #[test]
    fn bf16_qwen2_continues_a_cached_prefix() {
        use crate::model::testkit::{write_folder, TinyOptions};
        let tmp = tempfile::tempdir().unwrap();
        write_folder(tmp.path(), &TinyOptions::new(Arch::Qwen2)).unwrap();
        let spec = LocalModelSpec::new(tmp.path(), "cpu");
        let mut m = LoadedModel::load_with_dtype(&spec, Some(DType::BF16)).unwrap();
        assert_eq!(m.info().dtype, "bf16");
        let ids = m.encode("the score is 0.5 and the id is 1").unwrap();
        let full = m.forward_logits(&ids, 0).unwrap();
        m.forward_logits(&ids[..3], 0).unwrap();
        let cont = m.forward_logits(&ids[3..], 3).unwrap();
        let d = full
            .iter()
            .zip(&cont)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(d < 0.1, "bf16 continuation differs by {d}");
        assert_eq!(m.cached_len(), ids.len());
    }

    #[test]
    fn loaded_model_can_move_to_an_owner_thread() {
        fn is_send<T: Send>() {}
        is_send::<LoadedModel>();
    }
}
