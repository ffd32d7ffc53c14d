//! Tests of [`super::Qwen`]: logits against candle's models, the KV cache's snapshots, chunked
//! prefills, dense layers kept.

mod tests {
    use super::super::*;
    use crate::model::testkit::{self, write_folder, write_gguf, GgmlDType, TinyOptions};
    use candle_transformers::models::{quantized_qwen2, quantized_qwen3, qwen2, qwen3};

    const PROMPT: [u32; 12] = [5, 80, 17, 300, 2, 9, 44, 61, 200, 3, 120, 7];

    fn load_ours(path: &std::path::Path) -> Qwen {
        let files = ModelFiles::open(path).unwrap();
        let dtype = files.compute_dtype(&Device::Cpu, None);
        Qwen::from_files(&files, dtype, &Device::Cpu).unwrap()
    }

    /// Prefill, continuation after a cached prefix and single-token steps give candle's logits,
    /// for every arch and weights format.
    #[test]
    fn logits_match_candles_models() {
        let tmp = tempfile::tempdir().unwrap();
        for arch in [Arch::Qwen2, Arch::Qwen3] {
            let mut o = TinyOptions::new(arch);
            let dir = tmp.path().join(format!("{arch:?}"));
            write_folder(&dir, &o).unwrap();

            // candle's references.
            let dev = Device::Cpu;
            let input = Tensor::new(&PROMPT[..], &dev)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let head = Tensor::new(&PROMPT[..7], &dev)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let tail = Tensor::new(&PROMPT[7..], &dev)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let cfg = ModelFiles::open(&dir).unwrap().config.candle_json();
            let vb = unsafe {
                VarBuilder::from_mmaped_safetensors(
                    &[dir.join("model.safetensors")],
                    DType::F32,
                    &dev,
                )
            }
            .unwrap();
            let (full_ref, tail_ref) = match arch {
                Arch::Qwen2 => {
                    let c: qwen2::Config = serde_json::from_value(cfg).unwrap();
                    let mut m = qwen2::ModelForCausalLM::new(&c, vb).unwrap();
                    let f = m.forward(&input, 0).unwrap();
                    m.clear_kv_cache();
                    m.forward(&head, 0).unwrap();
                    (f, m.forward(&tail, 7).unwrap())
                }
                Arch::Qwen3 => {
                    let c: qwen3::Config = serde_json::from_value(cfg).unwrap();
                    let mut m = qwen3::ModelForCausalLM::new(&c, vb).unwrap();
                    let f = m.forward(&input, 0).unwrap();
                    m.clear_kv_cache();
                    m.forward(&head, 0).unwrap();
                    (f, m.forward(&tail, 7).unwrap())
                }
            };
            let mut ours = load_ours(&dir);
            let full = ours.forward(&PROMPT).unwrap();
            assert!(
                testkit::max_abs_diff(&full, &full_ref) < 1e-4,
                "{arch:?}: {}",
                testkit::max_abs_diff(&full, &full_ref)
            );
            ours.clear_kv_cache();
            ours.forward(&PROMPT[..7]).unwrap();
            let t = ours.forward(&PROMPT[7..]).unwrap();
            assert!(
                testkit::max_abs_diff(&t, &tail_ref) < 1e-4,
                "{arch:?}: {}",
                testkit::max_abs_diff(&t, &tail_ref)
            );

            // Q8_0 and Q5_0 run on gavel's kernels (gemv.rs), against candle's own.
            for dtype in [GgmlDType::Q8_0, GgmlDType::Q5_0] {
                // candle's scalar Q5_0 dot product debug-asserts an even block count, which
                // the tiny model's widths do not have: with debug assertions its reference
                // cannot run (gemv.rs's tests compare the Q5_0 kernel with it at an even width).
                if dtype == GgmlDType::Q5_0 && cfg!(debug_assertions) {
                    continue;
                }
                o.gguf_dtype = dtype;
                let gguf = tmp.path().join(format!("{arch:?}-{dtype:?}.gguf"));
                // `general.dtype` 0: candle's quantized Qwen3 computes its RoPE tables in f32,
                // as we do (its default is f16, off by ~1e-2 in the logits).
                let f32_rope = [("general.dtype", testkit::GgufValue::U32(0))];
                write_gguf(&gguf, &o, &f32_rope).unwrap();
                let mut f = std::fs::File::open(&gguf).unwrap();
                let content = gguf_file::Content::read(&mut f).unwrap();
                let q_ref = match arch {
                    Arch::Qwen2 => {
                        let mut m = quantized_qwen2::ModelWeights::from_gguf(content, &mut f, &dev)
                            .unwrap();
                        m.forward(&input, 0).unwrap()
                    }
                    Arch::Qwen3 => {
                        let mut m = quantized_qwen3::ModelWeights::from_gguf(content, &mut f, &dev)
                            .unwrap();
                        m.forward(&input, 0).unwrap()
                    }
                };
                let mut ours = load_ours(&gguf);
                let mut last = None;
                for &t in &PROMPT {
                    last = Some(ours.forward(&[t]).unwrap());
                }
                let last = last.unwrap();
                assert!(
                    testkit::max_abs_diff(&last, &q_ref) < 1e-3,
                    "{arch:?} {dtype:?} gguf: {}",
                    testkit::max_abs_diff(&last, &q_ref)
                );
                assert_eq!(argmax(&last), argmax(&q_ref));
            }
        }
    }

    /// A restored, cut snapshot continues exactly like a fresh prefill of the same tokens, and
    /// the snapshot is unchanged by what ran after it.
    #[test]
    fn snapshots_restore_cut_to_a_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        let mut o = TinyOptions::new(Arch::Qwen3);
        o.gguf_dtype = GgmlDType::Q8_0;
        let path = tmp.path().join("m.gguf");
        write_gguf(&path, &o, &[]).unwrap();
        let mut m = load_ours(&path);
        m.forward(&PROMPT).unwrap();
        let snap = m.kv_state();
        assert_eq!(snap.len(), PROMPT.len());
        // Diverge after 5 tokens.
        let other = [&PROMPT[..5], &[250, 251, 252][..]].concat();
        m.restore(&snap, 5).unwrap();
        assert_eq!(m.cached_len(), 5);
        let reused = m.forward(&other[5..]).unwrap();
        m.clear_kv_cache();
        let fresh = m.forward(&other).unwrap();
        assert!(
            testkit::max_abs_diff(&reused, &fresh) < 1e-5,
            "{}",
            testkit::max_abs_diff(&reused, &fresh)
        );
        // The snapshot still holds the original 12 positions.
        m.restore(&snap, usize::MAX).unwrap();
        assert_eq!(m.cached_len(), PROMPT.len());
        let cont = m.forward(&[9]).unwrap();
        m.clear_kv_cache();
        let whole = m.forward(&[&PROMPT[..], &[9]].concat()).unwrap();
        assert!(
            testkit::max_abs_diff(&cont, &whole) < 1e-5,
            "{}",
            testkit::max_abs_diff(&cont, &whole)
        );
        assert!(testkit::CONTEXT > PROMPT.len());
    }

    #[test]
    fn long_prompts_are_prefilled_in_chunks() {
        let tmp = tempfile::tempdir().unwrap();
        let mut o = TinyOptions::new(Arch::Qwen2);
        o.context_length = 2 * PREFILL_CHUNK + 40;
        write_folder(tmp.path(), &o).unwrap();
        let mut m = load_ours(tmp.path());
        let ids: Vec<u32> = (0..PREFILL_CHUNK as u32 + 30).map(|i| i % 250).collect();
        let chunked = m.forward(&ids).unwrap();
        m.clear_kv_cache();
        let mut last = None;
        for piece in ids.chunks(100) {
            last = Some(m.forward(piece).unwrap());
        }
        let d = testkit::max_abs_diff(&chunked, &last.unwrap());
        assert!(d < 1e-4, "{d}");
    }
}

/// The tiny Qwen2 as a GGUF of `dtype` weights in `dir`, opened.
#[cfg(test)]
fn quantized_tiny(
    dir: &std::path::Path,
    dtype: crate::model::testkit::GgmlDType,
) -> crate::model::ModelFiles {
    let mut o = crate::model::testkit::TinyOptions::new(crate::model::Arch::Qwen2);
    o.gguf_dtype = dtype;
    let path = dir.join(format!("m-{dtype:?}.gguf"));
    crate::model::testkit::write_gguf(&path, &o, &[]).unwrap();
    crate::model::ModelFiles::open(&path).unwrap()
}

mod keep_dense_tests {
    use super::super::*;
    use crate::model::testkit::GgmlDType;

    /// Layers dequantized once and kept give bit-identical logits to the dense path that
    /// dequantizes on every forward, for a prefill and for a one-token continuation.
    #[test]
    fn kept_dense_layers_give_the_same_logits() {
        let tmp = tempfile::tempdir().unwrap();
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0] {
            let files = super::quantized_tiny(tmp.path(), dtype);
            let load = || {
                let mut m = Qwen::from_files(&files, DType::F32, &Device::Cpu).unwrap();
                m.set_dense_always(true);
                m
            };
            let (mut each, mut kept) = (load(), load());
            kept.keep_dense().unwrap();
            for tokens in [&[5u32, 80, 17, 300, 2, 9][..], &[44][..]] {
                let a = each.forward(tokens).unwrap().to_vec1::<f32>().unwrap();
                let b = kept.forward(tokens).unwrap().to_vec1::<f32>().unwrap();
                assert_eq!(a, b, "{dtype:?}");
            }
        }
    }
}

mod packed_tests {
    use super::super::*;
    use crate::model::adapter::{Adapter, LoraConfig, LoraPair};
    use crate::model::testkit::{self, GgmlDType};

    /// An adapter on every projection of the top layer, random but seeded.
    fn adapter(cfg: &QwenConfig) -> Adapter {
        let lora = LoraConfig {
            r: 4,
            ..LoraConfig::default()
        };
        let top = cfg.num_hidden_layers - 1;
        let mut weights = std::collections::BTreeMap::new();
        for (n, module) in crate::model::adapter::TARGETS.iter().enumerate() {
            let (out, inp) = crate::model::adapter::projection_shape(cfg, module).unwrap();
            let t = |rows, cols, seed: u64| {
                let v: Vec<f32> = (0..rows * cols)
                    .map(|i| {
                        (((i as u64 + 7 * seed) * 2_654_435_761 % 1000) as f32 / 1000.0 - 0.5) * 0.2
                    })
                    .collect();
                Tensor::from_vec(v, (rows, cols), &Device::Cpu).unwrap()
            };
            let pair = LoraPair {
                a: t(4, inp, 2 * n as u64),
                b: t(out, 4, 2 * n as u64 + 1),
            };
            weights.insert((top, module.to_string()), pair);
        }
        Adapter {
            dir: "test-adapter".into(),
            lora,
            layers: Some(vec![top]),
            record: None,
            weights,
            identity: "test".into(),
        }
    }

    /// Sequences run together after one cached prefix give the logits each gets run alone
    /// after it (within 1e-4), with no adapter, a verdict adapter on each one's last position,
    /// and an adapter on every position; the cache keeps the prefix only.
    #[test]
    fn a_packed_forward_equals_each_sequence_run_alone() {
        let tmp = tempfile::tempdir().unwrap();
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0] {
            let files = super::quantized_tiny(tmp.path(), dtype);
            let mut m = Qwen::from_files(&files, DType::F32, &Device::Cpu).unwrap();
            m.set_dense_always(true);
            let slot = m.attach_adapter(&adapter(&files.config)).unwrap();
            let prefix = [5u32, 80, 17, 300, 2, 9, 44];
            let seqs: [&[u32]; 3] = [&[61, 200, 3], &[120, 7, 7, 7, 9], &[3, 3, 40, 41]];
            for rows in [
                AdapterRows::Off,
                AdapterRows::Last(slot),
                AdapterRows::All(slot),
            ] {
                // The prefix's keys and values are the base model's unless the adapter runs
                // on every position.
                let prefix_rows = match rows {
                    AdapterRows::Last(_) => AdapterRows::Off,
                    r => r,
                };
                m.clear_kv_cache();
                m.set_adapter_rows(prefix_rows);
                m.forward(&prefix).unwrap();
                let state = m.kv_state();
                m.set_adapter_rows(rows);
                let mut states = vec![state.clone(); seqs.len()];
                let packed = m.forward_batch(&seqs, &mut states).unwrap();
                assert_eq!(packed.dims(), &[3, files.config.vocab_size]);
                assert_eq!(
                    m.cached_len(),
                    prefix.len(),
                    "the cache keeps the prefix only"
                );
                for (i, seq) in seqs.iter().enumerate() {
                    m.restore(&state, prefix.len()).unwrap();
                    let alone = m.forward(seq).unwrap();
                    let d = testkit::max_abs_diff(&packed.get(i).unwrap(), &alone);
                    assert!(d < 1e-4, "{dtype:?} {rows:?} sequence {i}: {d}");
                    // Its keys and values are those the sequence run alone left.
                    assert_eq!(states[i].len(), prefix.len() + seq.len());
                    for layer in 0..files.config.num_hidden_layers {
                        let (k, v) = m.cached_kv(layer).unwrap();
                        let (pk, pv) = states[i].kv[layer].as_ref().unwrap();
                        let d = testkit::max_abs_diff(&pk.squeeze(0).unwrap(), &k)
                            .max(testkit::max_abs_diff(&pv.squeeze(0).unwrap(), &v));
                        assert!(
                            d < 1e-4,
                            "{dtype:?} {rows:?} sequence {i} layer {layer}: {d}"
                        );
                    }
                }
            }
            // Not a copy of one answer: the sequences' logits differ.
            m.set_adapter_rows(AdapterRows::Off);
            m.clear_kv_cache();
            m.forward(&prefix).unwrap();
            let packed = m.forward_batch(&seqs, &mut vec![m.kv_state(); 3]).unwrap();
            let d = testkit::max_abs_diff(&packed.get(0).unwrap(), &packed.get(1).unwrap());
            assert!(d > 1e-3, "{d}");
        }
    }

    /// Generations each continuing their own cache (prompts of different lengths), stepped in
    /// one batched forward, get the logits and keys and values each gets stepped alone: bit for
    /// bit on Q8_0 (gavel's row kernels do not depend on the number of rows), within 1e-4 on
    /// Q4_0 (candle's kernels), with forced runs of several tokens (one past the dense path's
    /// threshold) among single tokens, with and without an adapter on every position.
    #[test]
    fn a_batched_step_equals_each_generation_stepped_alone() {
        let tmp = tempfile::tempdir().unwrap();
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0] {
            let files = super::quantized_tiny(tmp.path(), dtype);
            let mut m = Qwen::from_files(&files, DType::F32, &Device::Cpu).unwrap();
            let slot = m.attach_adapter(&adapter(&files.config)).unwrap();
            // The last step is longer than a dense forward's threshold: alone it runs the dense
            // path, the others the quantized one.
            let long: Vec<u32> = (10..50).collect();
            let prompts: [&[u32]; 4] = [
                &[5, 80, 17, 300, 2, 9, 44],
                &[61, 200],
                &[7, 7, 1, 2, 3],
                &[4],
            ];
            let steps: [&[u32]; 4] = [&[12], &[200, 201, 202], &[9], &long];
            for rows in [AdapterRows::Off, AdapterRows::All(slot)] {
                m.set_adapter_rows(rows);
                let mut states: Vec<KvState> = prompts
                    .iter()
                    .map(|p| {
                        m.clear_kv_cache();
                        m.forward(p).unwrap();
                        m.kv_state()
                    })
                    .collect();
                let before = states.clone();
                let batched = m.forward_batch(&steps, &mut states).unwrap();
                assert_eq!(batched.dims(), &[4, files.config.vocab_size]);
                for (i, step) in steps.iter().enumerate() {
                    m.restore(&before[i], usize::MAX).unwrap();
                    let alone = m.forward(step).unwrap();
                    let d = testkit::max_abs_diff(&batched.get(i).unwrap(), &alone);
                    let bound = if dtype == GgmlDType::Q8_0 { 0.0 } else { 1e-4 };
                    assert!(d <= bound, "{dtype:?} {rows:?} generation {i}: {d}");
                    assert_eq!(states[i].len(), prompts[i].len() + step.len());
                    for layer in 0..files.config.num_hidden_layers {
                        let (k, v) = m.cached_kv(layer).unwrap();
                        let (bk, bv) = states[i].kv[layer].as_ref().unwrap();
                        let d = testkit::max_abs_diff(&bk.squeeze(0).unwrap(), &k)
                            .max(testkit::max_abs_diff(&bv.squeeze(0).unwrap(), &v));
                        assert!(
                            d <= bound,
                            "{dtype:?} {rows:?} generation {i} layer {layer}"
                        );
                    }
                }
                // Not one answer copied: the generations' logits differ.
                let d = testkit::max_abs_diff(&batched.get(0).unwrap(), &batched.get(2).unwrap());
                assert!(d > 1e-3, "{d}");
            }
        }
    }
}

/// A prompt's logits do not depend on how it was split into forwards (how much of it a prefix
/// cache held, or a packed suffix's prefix), bit for bit: projections are per row, and each
/// query sums its visible values in key order (`fused::causal_values`);
/// candle's matmul blocked the key axis by the matrix's length, so rows got other roundings.
mod split_tests {
    use super::super::*;
    use crate::model::testkit::{write_folder, TinyOptions};

    /// `tokens` in one forward, then in forwards of `splits` tokens, on the dense path. (gemm
    /// has other kernels for a few rows, and for matrices as small as the tiny model's, whose
    /// roundings differ: the splits keep clear of them.)
    fn check_splits(m: &mut Qwen, tokens: &[u32], splits: &[&[usize]]) {
        m.set_dense_always(true);
        m.clear_kv_cache();
        let whole = m.forward(tokens).unwrap().to_vec1::<f32>().unwrap();
        for split in splits {
            m.clear_kv_cache();
            let (mut at, mut last) = (0, None);
            for &n in split.iter() {
                last = Some(m.forward(&tokens[at..at + n]).unwrap());
                at += n;
            }
            assert_eq!(at, tokens.len());
            let last = last.unwrap().to_vec1::<f32>().unwrap();
            let d = whole
                .iter()
                .zip(&last)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(whole == last, "split {split:?}: {d}");
        }
    }

    /// Past 512 keys, where candle's matmul split the key axis (each of these failed with it).
    const SPLITS: [&[usize]; 4] = [&[550, 50], &[100, 500], &[300, 300], &[40, 560]];

    #[test]
    fn a_prompts_logits_do_not_depend_on_its_split() {
        let tmp = tempfile::tempdir().unwrap();
        let mut o = TinyOptions::new(Arch::Qwen2);
        o.context_length = 2 * PREFILL_CHUNK;
        write_folder(tmp.path(), &o).unwrap();
        let files = ModelFiles::open(tmp.path()).unwrap();
        let mut m = Qwen::from_files(&files, DType::F32, &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..600u32).map(|i| (i * 37 + 11) % 250).collect();
        check_splits(&mut m, &ids, &SPLITS);
    }

    /// The same on the real model's weights (`GAVEL_TEST_MODEL`), where a split moved a logit
    /// by 0.2.
    #[test]
    fn on_the_real_model_a_prompts_logits_do_not_depend_on_its_split() {
        let Some(path) = std::env::var_os("GAVEL_TEST_MODEL") else {
            eprintln!(
                "skipped: set GAVEL_TEST_MODEL to the 0.5B test model (tools/fetch-model.sh 0.5b)"
            );
            return;
        };
        let files = ModelFiles::open(std::path::Path::new(&path)).unwrap();
        let mut m = Qwen::from_files(&files, DType::F32, &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..600u32).map(|i| 100 + (i * 7919) % 20000).collect();
        check_splits(&mut m, &ids, &SPLITS);
    }
}
