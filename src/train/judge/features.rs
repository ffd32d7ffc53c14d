//! The frozen part of the judge, run once per example: the base model's inference network
//! ([`crate::model::infer`], the arithmetic the local judge serves with) over each question,
//! keeping what an adapter on the top K layers needs ([`Context`]). A group's examples share the
//! group's common token prefix, prefilled and kept once for them all.

use std::sync::Arc;

use candle_core::{Device, Tensor};

use crate::domain::prompt::ChatMessage;
use crate::model::adapter::Reach;
use crate::model::infer::{KvState, Qwen};
use crate::model::ModelFiles;

use crate::train::TrainError;

/// Positions a question's final forward runs at least, as the local judge's questions do (its logits
/// then do not depend on how the prompt was split).
const MIN_RUN: usize = 3;

/// What training needs of one example.
#[derive(Debug, Clone)]
pub struct Features {
    pub context: Context,
    /// The verdict position (the prompt's length − 1).
    pub pos: usize,
    /// The base model's probability of the first answer, as the local judge reads it.
    pub base_first: f64,
}

/// What the adapted layers start from, by the adapter's reach.
#[derive(Debug, Clone)]
pub enum Context {
    /// [`Reach::Verdict`]: the hidden state entering the first adapted layer at the verdict
    /// position (`[hidden]`, f32), and per adapted layer the keys and values
    /// `[kv_heads, len, head_dim]` of the positions before it (which the adapter never
    /// changes): the group's shared part, then the example's own.
    Verdict {
        hidden: Tensor,
        shared: Arc<Vec<(Tensor, Tensor)>>,
        own: Vec<(Tensor, Tensor)>,
    },
    /// [`Reach::All`]: the hidden states entering the first adapted layer at every position
    /// (`[len, hidden]`, f32): the group's shared part, then the example's own, which ends at
    /// the verdict position. The adapted layers run over all of them.
    All { shared: Arc<Tensor>, own: Tensor },
}

impl Features {
    /// [`Context::Verdict`]'s keys and values of adapted layer `i` before the verdict position.
    pub fn context(&self, i: usize) -> candle_core::Result<(Tensor, Tensor)> {
        let Context::Verdict { shared, own, .. } = &self.context else {
            candle_core::bail!("features of every position have no frozen keys and values");
        };
        let (sk, sv) = &shared[i];
        let (ok, ov) = &own[i];
        match (sk.dim(1)?, ok.dim(1)?) {
            (0, _) => Ok((ok.clone(), ov.clone())),
            (_, 0) => Ok((sk.clone(), sv.clone())),
            _ => Ok((Tensor::cat(&[sk, ok], 1)?, Tensor::cat(&[sv, ov], 1)?)),
        }
    }

    /// [`Context::All`]'s hidden states of the whole prompt `[pos + 1, hidden]`.
    pub fn all_positions(&self) -> candle_core::Result<Tensor> {
        let Context::All { shared, own } = &self.context else {
            candle_core::bail!("verdict-position features have no hidden states of the context");
        };
        if shared.dim(0)? == 0 {
            Ok(own.clone())
        } else {
            Tensor::cat(&[shared.as_ref(), own], 0)
        }
    }
}

/// The base model and the prompt's tokenization.
pub struct BaseModel {
    files: ModelFiles,
    net: Option<Qwen>,
    device: Device,
    /// The first adapted layer.
    pub first: usize,
    /// Which positions the adapter changes: what the features keep.
    pub reach: Reach,
    /// Per mode, each answer's tokens (see [`crate::model::LoadedTokenizer::choice_tokens`]).
    pub choices: Vec<Vec<Vec<u32>>>,
}

fn tensor_err(e: candle_core::Error) -> TrainError {
    TrainError::Tensor(e)
}

impl BaseModel {
    /// The model's network is opened on the first [`BaseModel::group`]: a run whose features
    /// are all on disk never opens it (on the 1.5B its dense copy is some 6 GB).
    pub fn new(
        files: ModelFiles,
        device: &Device,
        first: usize,
        reach: Reach,
        choices: &[Vec<Vec<String>>],
    ) -> Result<BaseModel, TrainError> {
        let choices = choices
            .iter()
            .map(|c| files.tokenizer.choice_tokens(c, files.config.vocab_size))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BaseModel {
            files,
            net: None,
            device: device.clone(),
            first,
            reach,
            choices,
        })
    }

    /// Whether the network has been opened (a test's check that cached features spare it).
    pub fn opened(&self) -> bool {
        self.net.is_some()
    }

    /// The network, opened on first use with every layer kept dequantized for the whole pass.
    fn net(&mut self) -> Result<&mut Qwen, TrainError> {
        if self.net.is_none() {
            let dtype = self.files.compute_dtype(&self.device, None);
            let mut net = Qwen::from_files(&self.files, dtype, &self.device)?;
            net.set_dense_always(true);
            net.keep_dense().map_err(tensor_err)?;
            self.net = Some(net);
        }
        Ok(self.net.as_mut().expect("opened above"))
    }

    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// `cpu` or `cuda` (the index does not change the arithmetic): see
    /// [`super::feature_file::FeatureKey::device`].
    pub fn device_kind(&self) -> String {
        // `cuda:1` computes as `cuda:0` does: the kind without the index.
        let name = crate::model::device_name(&self.device);
        name.split(':').next().unwrap_or("cpu").to_string()
    }

    /// The question's tokens: the chat template (assistant turn opened), then the tokenizer.
    pub fn tokens(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, TrainError> {
        let text = self
            .files
            .template
            .render_with(messages, &Default::default())?;
        Ok(self.files.tokenizer.encode(&text)?)
    }

    /// The features of a group's prompts (token ids, and the index of the mode each is asked
    /// in), sharing their common prefix.
    pub fn group(&mut self, asked: &[(Vec<u32>, usize)]) -> Result<Vec<Features>, TrainError> {
        let prompts: Vec<&Vec<u32>> = asked.iter().map(|(p, _)| p).collect();
        let shortest = prompts.iter().map(|p| p.len()).min().unwrap_or(0);
        if shortest < 2 {
            return Err(TrainError::Input(
                "a question of fewer than 2 tokens".into(),
            ));
        }
        let context = self.files.config.context_length();
        if let Some(p) = prompts.iter().find(|p| p.len() >= context) {
            return Err(TrainError::Input(format!(
                "a question of {} tokens leaves no room in the model's context of {context}",
                p.len()
            )));
        }
        let common = prompts
            .iter()
            .skip(1)
            .fold(shortest, |n, p| n.min(common_prefix(prompts[0], p)));
        let shared_len = common.min(shortest - MIN_RUN.min(shortest));
        let (first, all) = (self.first, self.reach == Reach::All);
        self.net()?.clear_kv_cache();
        let (mut shared_kv, mut shared_hidden, mut state) = (None, None, KvState::default());
        if shared_len > 0 {
            let (_, hidden) = self
                .net()?
                .forward_capturing(&prompts[0][..shared_len], all.then_some(first))
                .map_err(tensor_err)?;
            if all {
                shared_hidden = hidden;
            } else {
                shared_kv = Some(self.kv_of_adapted(0, shared_len)?);
            }
            state = self.net()?.kv_state();
        }
        let shared_kv = Arc::new(match shared_kv {
            Some(kv) => kv,
            None => self.empty_kv()?,
        });
        let shared_hidden = Arc::new(match shared_hidden {
            Some(h) => h,
            None => Tensor::zeros(
                (0, self.files.config.hidden_size),
                candle_core::DType::F32,
                &Device::Cpu,
            )
            .map_err(tensor_err)?,
        });
        let mut out = Vec::with_capacity(prompts.len());
        for (p, mode) in asked {
            let net = self.net()?;
            if shared_len > 0 {
                net.restore(&state, shared_len).map_err(tensor_err)?;
            } else {
                net.clear_kv_cache();
            }
            let (logits, hidden) = net
                .forward_capturing(&p[shared_len..], Some(first))
                .map_err(tensor_err)?;
            let logits = logits.to_vec1::<f32>().map_err(tensor_err)?;
            let hidden = hidden.expect("captured");
            let context = if all {
                Context::All {
                    shared: shared_hidden.clone(),
                    own: hidden,
                }
            } else {
                let n = hidden.dim(0).map_err(tensor_err)?;
                Context::Verdict {
                    hidden: hidden.get(n - 1).map_err(tensor_err)?,
                    shared: shared_kv.clone(),
                    own: self.kv_of_adapted(shared_len, p.len() - 1 - shared_len)?,
                }
            };
            out.push(Features {
                context,
                pos: p.len() - 1,
                base_first: first_share(&logits, &self.choices[*mode])?,
            });
        }
        self.net()?.clear_kv_cache();
        Ok(out)
    }

    /// The adapted layers' cached keys and values at positions `start..start + len`, copied
    /// out of the cache (so they outlive it).
    fn kv_of_adapted(&self, start: usize, len: usize) -> Result<Vec<(Tensor, Tensor)>, TrainError> {
        let net = (self.net.as_ref()).ok_or_else(|| TrainError::Model("no network open".into()))?;
        (self.first..self.files.config.num_hidden_layers)
            .map(|l| {
                let (k, v) = net
                    .cached_kv(l)
                    .ok_or_else(|| TrainError::Model(format!("no keys cached at layer {l}")))?;
                let cut = |t: Tensor| -> candle_core::Result<Tensor> {
                    t.narrow(1, start, len)?
                        .to_dtype(candle_core::DType::F32)?
                        .contiguous()?
                        .copy()
                };
                Ok((cut(k).map_err(tensor_err)?, cut(v).map_err(tensor_err)?))
            })
            .collect()
    }

    fn empty_kv(&self) -> Result<Vec<(Tensor, Tensor)>, TrainError> {
        let c = &self.files.config;
        let shape = (c.num_kv_heads(), 0, c.head_dim());
        let dev = Device::Cpu;
        (self.first..c.num_hidden_layers)
            .map(|_| {
                let z = Tensor::zeros(shape, candle_core::DType::F32, &dev).map_err(tensor_err)?;
                Ok((z.clone(), z))
            })
            .collect()
    }
}

/// The first answer's share of the answers' probability, as the local judge computes it; an
/// error where the model put no mass on any answer (the judge has no verdict there either).
pub fn first_share(logits: &[f32], choices: &[Vec<u32>]) -> Result<f64, TrainError> {
    let mass = crate::model::tokenizer::answer_masses(logits, choices);
    let total: f64 = mass.iter().sum();
    if total > 0.0 && total.is_finite() {
        Ok(mass[0] / total)
    } else {
        Err(TrainError::Model(
            "the base model gives the answers no probability on a question".into(),
        ))
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
