//! [`Qwen::forward_batch`]: several sequences, each after its own cached positions, in one
//! forward (see [`Packing`]): a group's question suffixes after their shared prefix, decoding
//! generations after their own prompts.

use candle_core::{DType, Result, Tensor};

use super::{KvState, Qwen};
use crate::model::infer::layer::Packing;

impl Qwen {
    /// Runs each of `seqs` after its own cached positions, `states` (appended to, as each would
    /// be alone), in one forward (see [`Packing`]; a group's question suffixes after their shared
    /// prefix, generations after their own prompts); returns the logits after each one's last token
    /// (`[sequences, vocab]`, f32). The model's own cache is not touched. Each sequence's
    /// multiplications run on the arithmetic it would have alone (sequences of at least
    /// `dense_from` tokens on the dense path, shorter ones quantized; on a CPU a mix runs as two
    /// forwards), so on weights whose row kernels do not depend on the number of rows (Q8_0
    /// and Q5_0 on a CPU, see [`super::gemv`]) the logits are those of each sequence alone,
    /// bit for bit.
    pub fn forward_batch(&mut self, seqs: &[&[u32]], states: &mut [KvState]) -> Result<Tensor> {
        if states.len() != seqs.len() {
            candle_core::bail!("{} sequences but {} caches", seqs.len(), states.len());
        }
        let long: Vec<usize> = (0..seqs.len())
            .filter(|&i| seqs[i].len() >= self.dense_from)
            .collect();
        if long.is_empty() || long.len() == seqs.len() || !self.geo.device.is_cpu() {
            return self.run_packed(seqs, states, !long.is_empty());
        }
        // Long and short sequences at once (a forced run among decoded tokens): each part on
        // the arithmetic it has alone, so none gets another's rounding.
        let mut rows: Vec<Option<Tensor>> = vec![None; seqs.len()];
        for dense in [true, false] {
            let part: Vec<usize> = (0..seqs.len())
                .filter(|i| long.contains(i) == dense)
                .collect();
            let chosen: Vec<&[u32]> = part.iter().map(|&i| seqs[i]).collect();
            let mut own: Vec<KvState> = part.iter().map(|&i| states[i].clone()).collect();
            let logits = self.run_packed(&chosen, &mut own, dense)?;
            for (k, (&i, state)) in part.iter().zip(own).enumerate() {
                states[i] = state;
                rows[i] = Some(logits.get(k)?);
            }
        }
        let rows: Vec<Tensor> = rows
            .into_iter()
            .map(|r| r.expect("every row run"))
            .collect();
        Tensor::stack(&rows, 0)
    }

    /// [`Qwen::forward_batch`], with the dense f32 path (see [`Proj::dense`]) or not. An
    /// adapter on the last position ([`AdapterRows::Last`]) runs on each sequence's last.
    fn run_packed(
        &mut self,
        seqs: &[&[u32]],
        states: &mut [KvState],
        dense: bool,
    ) -> Result<Tensor> {
        if seqs.is_empty() || seqs.iter().any(|s| s.is_empty()) {
            candle_core::bail!("a packed forward needs sequences of at least one token");
        }
        let starts: Vec<usize> = states.iter().map(|s| s.len).collect();
        let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let device = self.geo.device.clone();
        let packing = Packing::new(&starts, &lens, &self.geo.cos, &self.geo.sin)?;
        let ids = Tensor::new(seqs.concat(), &device)?;
        let mut x = self
            .embed
            .index_select(&ids, 0)?
            .to_dtype(self.geo.dtype)?
            .unsqueeze(0)?;
        let dense = dense && device.is_cpu();
        let layers = self.layers.len();
        for state in states.iter_mut() {
            state.kv.resize(layers, None);
        }
        for i in 0..layers {
            let dense_layer;
            let layer = if dense {
                dense_layer = self.layers[i].dense(&device)?;
                &dense_layer
            } else {
                &self.layers[i]
            };
            let mut caches: Vec<&mut Option<(Tensor, Tensor)>> =
                states.iter_mut().map(|s| &mut s.kv[i]).collect();
            x = self
                .geo
                .layer_packed(layer, &mut caches, &x, &packing, self.adapter_rows)?;
        }
        for (state, n) in states.iter_mut().zip(&lens) {
            state.len += n;
        }
        let last = x.index_select(&packing.lasts, 1)?;
        let last = candle_nn::ops::rms_norm(&last, &self.norm, self.geo.eps)?;
        self.lm_head
            .forward(&last)?
            .squeeze(0)?
            .to_dtype(DType::F32)
    }
}
