//! The keys and values of the positions a model has seen, per layer, and what a batch of rows
//! of different lengths needs to decode together: each row's left padding, masked from every
//! query, and each row's own positions for the rotary embedding.

use candle_core::{DType, Device, Result, Tensor};

/// Keys and values of the positions seen so far, per layer: for sampling (values only), or a
/// prompt's for the completions that continue it in a training pass (with their graph).
#[derive(Default)]
pub struct KvCache {
    pub(super) layers: Vec<Option<(Tensor, Tensor)>>,
    /// Whether the cached tensors keep the graph they came from (see [`KvCache::tracked`]).
    pub(super) keep_graph: bool,
    /// Per row, how many positions at its start are padding ([`KvCache::stack_left_padded`]);
    /// empty when no row is padded.
    pad: Vec<usize>,
}

impl KvCache {
    /// Positions cached, padding included.
    pub fn len(&self) -> usize {
        match self.layers.first() {
            Some(Some((k, _))) => k.dim(2).unwrap_or(0),
            _ => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A cache whose tensors keep their graph, so a loss on the positions after it trains the
    /// adapters through the cached positions too. The default cache holds values only: a
    /// tensor that tracks its ops keeps every activation it came from alive, so a sampled
    /// completion's cache held the graph of every decoding step (12.8 GB peak for 16 completions
    /// of 64 tokens on the 0.5B, against 8.0 GB detached; BENCHMARKS.md).
    pub fn tracked() -> KvCache {
        KvCache {
            keep_graph: true,
            ..KvCache::default()
        }
    }

    /// The cache of rows `rows` (indices into the batch, repeats allowed): a prompt prefilled
    /// once, then sampled several times.
    pub fn select_rows(&self, rows: &Tensor) -> Result<KvCache> {
        let layers = self
            .layers
            .iter()
            .map(|l| match l {
                Some((k, v)) => Ok(Some((k.index_select(rows, 0)?, v.index_select(rows, 0)?))),
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        let pad = if self.pad.is_empty() {
            Vec::new()
        } else {
            let rows = rows.to_vec1::<u32>()?;
            rows.iter().map(|&r| self.pad[r as usize]).collect()
        };
        Ok(KvCache {
            layers,
            keep_graph: self.keep_graph,
            pad,
        })
    }

    /// The caches of prompts of different lengths, stacked into one batch so their rows decode
    /// together: a shorter row's keys and values are left-padded with zeros to the longest
    /// row's length. [`KvCache::attention_mask`] hides the padding from every query, and
    /// [`KvCache::positions`] gives each row its own positions, so a row decodes exactly as it
    /// would alone (its prompt was prefilled alone, at positions from 0). Each cache may hold
    /// several rows of one length. Values only: no graph is kept.
    pub fn stack_left_padded(caches: &[KvCache]) -> Result<KvCache> {
        let longest = caches.iter().map(KvCache::len).max().unwrap_or(0);
        let n_layers = caches.first().map_or(0, |c| c.layers.len());
        if caches.iter().any(|c| c.layers.len() != n_layers) {
            candle_core::bail!("stacked caches must come from one model");
        }
        let mut pad = Vec::new();
        for c in caches {
            let rows = match c.layers.first() {
                Some(Some((k, _))) => k.dim(0)?,
                _ => candle_core::bail!("a stacked cache must hold a prefilled prompt"),
            };
            pad.extend(std::iter::repeat_n(longest - c.len(), rows));
        }
        let padded = |t: &Tensor, missing: usize| -> Result<Tensor> {
            let t = t.detach();
            if missing == 0 {
                return Ok(t);
            }
            let (b, h, _, d) = t.dims4()?;
            let zeros = Tensor::zeros((b, h, missing, d), t.dtype(), t.device())?;
            Tensor::cat(&[&zeros, &t], 2)
        };
        let mut layers = Vec::with_capacity(n_layers);
        for i in 0..n_layers {
            let mut ks = Vec::with_capacity(caches.len());
            let mut vs = Vec::with_capacity(caches.len());
            for c in caches {
                let Some((k, v)) = &c.layers[i] else {
                    candle_core::bail!("a stacked cache misses layer {i}");
                };
                ks.push(padded(k, longest - c.len())?);
                vs.push(padded(v, longest - c.len())?);
            }
            layers.push(Some((Tensor::cat(&ks, 0)?, Tensor::cat(&vs, 0)?)));
        }
        if pad.iter().all(|&p| p == 0) {
            pad.clear();
        }
        Ok(KvCache {
            layers,
            keep_graph: false,
            pad,
        })
    }

    /// For `t` new positions after the cache (`offset` = its length), each row's rotary
    /// positions, row-major `[B · t]`: a row's padding does not count, so its first real
    /// position is 0. `None` when no row is padded (every row's positions are `offset..`).
    pub fn positions(&self, offset: usize, t: usize) -> Option<Vec<u32>> {
        if self.pad.is_empty() {
            return None;
        }
        Some(
            self.pad
                .iter()
                .flat_map(|&p| (0..t).map(move |i| (offset + i - p) as u32))
                .collect(),
        )
    }

    /// The additive attention mask `[B, 1, t, offset + t]` for `t` new positions of a padded
    /// cache: causal, and every row's padding hidden. `None` when no row is padded.
    pub fn attention_mask(
        &self,
        offset: usize,
        t: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Option<Tensor>> {
        if self.pad.is_empty() {
            return Ok(None);
        }
        let s = offset + t;
        let mask: Vec<f32> = self
            .pad
            .iter()
            .flat_map(|&p| {
                (0..t).flat_map(move |i| {
                    (0..s).map(move |j| {
                        if j < p || j > i + offset {
                            f32::NEG_INFINITY
                        } else {
                            0.0
                        }
                    })
                })
            })
            .collect();
        let b = self.pad.len();
        Ok(Some(
            Tensor::from_vec(mask, (b, 1, t, s), device)?.to_dtype(dtype)?,
        ))
    }

    /// Each layer's cached keys and values.
    #[cfg(test)]
    pub fn layers(&self) -> impl Iterator<Item = &(Tensor, Tensor)> {
        self.layers.iter().flatten()
    }
}
