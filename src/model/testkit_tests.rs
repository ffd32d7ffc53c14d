//! The test fixtures' own checks (apart from `testkit.rs`, which the integration tests include
//! too and should not run again in every test binary).

use super::testkit::*;

#[test]
fn gguf_names_follow_llama_cpp() {
    assert_eq!(
        gguf_name("model.layers.1.self_attn.q_proj.bias"),
        "blk.1.attn_q.bias"
    );
    assert_eq!(
        gguf_name("model.layers.0.mlp.down_proj.weight"),
        "blk.0.ffn_down.weight"
    );
    assert_eq!(
        gguf_name("model.layers.0.self_attn.k_norm.weight"),
        "blk.0.attn_k_norm.weight"
    );
    assert_eq!(gguf_name("model.embed_tokens.weight"), "token_embd.weight");
}

#[test]
fn tiny_vocab_fits_the_model() {
    let (vocab, merges, added) = tiny_vocab();
    assert!(
        vocab.len() > 256 + 20 && vocab.len() <= VOCAB,
        "{}",
        vocab.len()
    );
    assert_eq!(merges.len() + 256 + SPECIALS.len(), vocab.len());
    assert_eq!(added.last().unwrap().content, "<|im_end|>");
    assert_eq!(special_id("<|im_end|>") as usize, vocab.len() - 1);
}

/// The tiny models' weights are pinned: tests compare logits against figures computed from them.
#[test]
fn tiny_weights_do_not_move() {
    use sha2::{Digest, Sha256};
    let digest = |arch, tied| {
        let t = tensors(arch, tied);
        let mut names: Vec<&String> = t.keys().collect();
        names.sort();
        let mut h = Sha256::new();
        for n in names {
            h.update(n.as_bytes());
            for v in t[n].flatten_all().unwrap().to_vec1::<f32>().unwrap() {
                h.update(v.to_le_bytes());
            }
        }
        format!("{:x}", h.finalize())
    };
    assert_eq!(
        digest(super::Arch::Qwen2, false),
        "eb73dc792c0215f5e6cb5dcbba5baf05518246d2c0e2e314441433adede08318"
    );
    assert_eq!(
        digest(super::Arch::Qwen3, true),
        "e6a4f8c5036a5fae816c708bc542b891b9e6e8985b3c27099daa820e0851f6a1"
    );
}
