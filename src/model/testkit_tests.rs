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
