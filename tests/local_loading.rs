//! Loading, prompting and serving of the local judge on tiny random-weight Qwen2/Qwen3 models written by
//! the test (safetensors folders, sharded or not, and GGUF files), so CI needs no downloads; and,
//! when `GAVEL_TEST_MODEL` names one, a real Qwen2.5 0.5B GGUF or model folder.
#![cfg(feature = "local")]

mod common;
/// The judge served by the daemon, models by Hugging Face id, and the shipped configs (modules
/// here, not test binaries of their own: each binary links candle, which CI pays for).
mod local {
    mod adapters;
    mod examples;
    mod hub;
    mod hub_download;
    #[cfg(feature = "train")]
    mod judge_head;
    #[cfg(feature = "train")]
    mod judge_training;
    #[cfg(feature = "train")]
    mod load;
    mod modes;
    mod serving;
    mod shared_model;
}

use std::path::{Path, PathBuf};

use common::model::testkit::{self, special_id, GgmlDType, GgufValue, TinyOptions};
use gavel::domain::prompt::ChatMessage;
use gavel::judge::local::{LoadedModel, LocalModelSpec};
use gavel::model::{Arch, LocalError, ModelFormat, RenderOptions, TemplateOrigin};

/// Qwen2.5-Instruct's chat template, as its `tokenizer_config.json` has it (JSON-escaped).
/// Qwen team, Apache-2.0.
const QWEN25_TEMPLATE_JSON: &str = r##""{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\" and not message.tool_calls) %}\n        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n""##;

/// Qwen3's (Qwen3-8B) chat template, as its `tokenizer_config.json` has it (JSON-escaped).
/// Qwen team, Apache-2.0.
const QWEN3_TEMPLATE_JSON: &str = r##""{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0].role == 'system' %}\n        {{- messages[0].content + '\\n\\n' }}\n    {%- endif %}\n    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages[0].role == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n{%- for message in messages[::-1] %}\n    {%- set index = (messages|length - 1) - loop.index0 %}\n    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n        {%- set ns.multi_step_tool = false %}\n        {%- set ns.last_query_index = index %}\n    {%- endif %}\n{%- endfor %}\n{%- for message in messages %}\n    {%- if message.content is string %}\n        {%- set content = message.content %}\n    {%- else %}\n        {%- set content = '' %}\n    {%- endif %}\n    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n    {%- elif message.role == \"assistant\" %}\n        {%- set reasoning_content = '' %}\n        {%- if message.reasoning_content is string %}\n            {%- set reasoning_content = message.reasoning_content %}\n        {%- else %}\n            {%- if '</think>' in content %}\n                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n            {%- endif %}\n        {%- endif %}\n        {%- if loop.index0 > ns.last_query_index %}\n            {%- if loop.last or (not loop.last and reasoning_content) %}\n                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n            {%- else %}\n                {{- '<|im_start|>' + message.role + '\\n' + content }}\n            {%- endif %}\n        {%- else %}\n            {{- '<|im_start|>' + message.role + '\\n' + content }}\n        {%- endif %}\n        {%- if message.tool_calls %}\n            {%- for tool_call in message.tool_calls %}\n                {%- if (loop.first and content) or (not loop.first) %}\n                    {{- '\\n' }}\n                {%- endif %}\n                {%- if tool_call.function %}\n                    {%- set tool_call = tool_call.function %}\n                {%- endif %}\n                {{- '<tool_call>\\n{\"name\": \"' }}\n                {{- tool_call.name }}\n                {{- '\", \"arguments\": ' }}\n                {%- if tool_call.arguments is string %}\n                    {{- tool_call.arguments }}\n                {%- else %}\n                    {{- tool_call.arguments | tojson }}\n                {%- endif %}\n                {{- '}\\n</tool_call>' }}\n            {%- endfor %}\n        {%- endif %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n        {{- content }}\n        {{- '\\n</tool_response>' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking is defined and enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}""##;

fn qwen25_template() -> String {
    serde_json::from_str(QWEN25_TEMPLATE_JSON).unwrap()
}

fn qwen3_template() -> String {
    serde_json::from_str(QWEN3_TEMPLATE_JSON).unwrap()
}

fn msg(role: &str, content: &str) -> ChatMessage {
    ChatMessage {
        role: role.into(),
        content: content.into(),
    }
}

fn cpu(path: &Path) -> LocalModelSpec {
    LocalModelSpec::new(path, "cpu")
}

fn folder(tmp: &Path, name: &str, o: &TinyOptions) -> PathBuf {
    let dir = tmp.join(name);
    testkit::write_folder(&dir, o).unwrap();
    dir
}

fn gguf(tmp: &Path, name: &str, o: &TinyOptions, extra: &[(&str, GgufValue)]) -> PathBuf {
    let path = tmp.join(name);
    testkit::write_gguf(&path, o, extra).unwrap();
    path
}

fn load_err(spec: &LocalModelSpec) -> LocalError {
    let e = LoadedModel::load(spec).expect_err("the load should fail");
    assert!(!e.to_string().contains('\n'), "not one line: {e}");
    e
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn check_logits(m: &mut LoadedModel) -> Vec<f32> {
    let ids = m.prompt_tokens(&[msg("user", "the score is 0.5")]).unwrap();
    let logits = m.forward_logits(&ids, 0).unwrap();
    assert_eq!(logits.len(), m.vocab_size());
    assert!(logits.iter().all(|x| x.is_finite()), "non-finite logits");
    let (lo, hi) = logits
        .iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    assert!(hi - lo > 1e-3, "flat logits {lo}..{hi}");
    logits
}

/// What every tiny model must have: byte vocabulary, EOS ids, special tokens.
fn check_tiny_vocab(m: &LoadedModel) {
    let v = m.vocab_bytes();
    assert_eq!(v.len(), testkit::VOCAB);
    assert_eq!(v[b'a' as usize], b"a");
    assert_eq!(v[b' ' as usize], b" ");
    assert_eq!(v[b'\n' as usize], b"\n");
    assert_eq!(v[0xE9], [0xE9u8]);
    let the = m.encode(" the").unwrap();
    assert_eq!(the.len(), 1, "{the:?}");
    assert_eq!(v[the[0] as usize], b" the");
    for s in testkit::SPECIALS {
        assert!(v[special_id(s) as usize].is_empty(), "{s} has bytes");
    }
    let first_pad = special_id("<|im_end|>") as usize + 1;
    assert!(
        v[first_pad..].iter().all(Vec::is_empty),
        "padding ids have bytes"
    );
    let mut eos = vec![special_id("<|endoftext|>"), special_id("<|im_end|>")];
    eos.sort();
    assert_eq!(m.eos_ids(), eos);
}

fn check_round_trips(m: &LoadedModel) {
    for text in [
        "plain ascii, the score is 0.75 {\"id\": \"1\"}",
        "héllo wörld — 日本語 🎉\n\n\ttabs",
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        "",
    ] {
        let ids = m.encode(text).unwrap();
        assert_eq!(m.decode(&ids).unwrap(), text);
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&i| m.vocab_bytes()[i as usize].clone())
            .collect();
        if !text.contains("<|") {
            assert_eq!(bytes, text.as_bytes(), "vocab bytes of {text:?}");
        }
    }
    let ids = m.encode("<|im_start|>user").unwrap();
    assert_eq!(ids[0], special_id("<|im_start|>"));
    assert_eq!(m.decode(&ids[1..]).unwrap(), "user");
}

#[test]
fn safetensors_qwen2_loads_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder(tmp.path(), "qwen2", &TinyOptions::new(Arch::Qwen2));
    let mut m = LoadedModel::load(&cpu(&dir)).unwrap();
    let info = m.info().clone();
    assert_eq!(
        (info.arch, info.format),
        (Arch::Qwen2, ModelFormat::Safetensors)
    );
    assert_eq!(
        (info.vocab_size, info.context_length, info.num_layers),
        (320, 256, 2)
    );
    assert_eq!((info.device.as_str(), info.dtype.as_str()), ("cpu", "f32"));
    assert!(info.weight_bytes > 0);
    check_tiny_vocab(&m);
    check_round_trips(&m);
    assert_eq!(m.chat_template().origin(), &TemplateOrigin::TokenizerConfig);
    let prompt = m.chat_template().render(&[msg("user", "Hi")]).unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>system\nYou are a judge.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    check_logits(&mut m);
}

#[test]
fn sharded_tied_qwen3_loads_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = TinyOptions::new(Arch::Qwen3);
    (o.shards, o.tied) = (2, true);
    let dir = folder(tmp.path(), "qwen3", &o);
    assert!(dir.join("model-00002-of-00002.safetensors").exists());
    assert!(!dir.join("model.safetensors").exists());
    let mut m = LoadedModel::load(&cpu(&dir)).unwrap();
    assert_eq!(m.arch(), Arch::Qwen3);
    check_tiny_vocab(&m);
    check_logits(&mut m);
}

#[test]
fn gguf_qwen2_and_qwen3_load_with_their_tokenizer() {
    let tmp = tempfile::tempdir().unwrap();
    for arch in [Arch::Qwen2, Arch::Qwen3] {
        for dtype in [GgmlDType::F32, GgmlDType::Q8_0] {
            let mut o = TinyOptions::new(arch);
            o.gguf_dtype = dtype;
            let path = gguf(tmp.path(), &format!("{arch:?}-{dtype:?}.gguf"), &o, &[]);
            let mut m = LoadedModel::load(&cpu(&path)).unwrap();
            let info = m.info().clone();
            assert_eq!((info.arch, info.format), (arch, ModelFormat::Gguf));
            assert_eq!(info.dtype, format!("{dtype:?}"));
            assert_eq!((info.vocab_size, info.context_length), (320, 256));
            assert_eq!(
                info.name.as_deref(),
                Some(if arch == Arch::Qwen2 {
                    "tiny-qwen2"
                } else {
                    "tiny-qwen3"
                })
            );
            check_tiny_vocab(&m);
            check_round_trips(&m);
            assert_eq!(m.chat_template().origin(), &TemplateOrigin::Gguf);
            check_logits(&mut m);
        }
    }
}

#[test]
fn gguf_and_safetensors_tokenize_and_compute_alike() {
    let tmp = tempfile::tempdir().unwrap();
    for arch in [Arch::Qwen2, Arch::Qwen3] {
        let o = TinyOptions::new(arch);
        let dir = folder(tmp.path(), &format!("{arch:?}"), &o);
        let file = gguf(tmp.path(), &format!("{arch:?}.gguf"), &o, &[]);
        let mut a = LoadedModel::load(&cpu(&dir)).unwrap();
        let mut b = LoadedModel::load(&cpu(&file)).unwrap();
        assert_eq!(a.vocab_bytes(), b.vocab_bytes());
        let text = a
            .chat_template()
            .render(&[msg("user", "is the score 0.9? ünï")])
            .unwrap();
        let ids = a.encode(&text).unwrap();
        assert_eq!(ids, b.encode(&text).unwrap());
        let (la, lb) = (
            a.forward_logits(&ids, 0).unwrap(),
            b.forward_logits(&ids, 0).unwrap(),
        );
        let d = max_diff(&la, &lb);
        eprintln!("{arch:?}: max logit diff GGUF vs safetensors {d}");
        assert!(
            d < 1e-3,
            "{arch:?}: GGUF and safetensors logits differ by {d}"
        );
    }
}

/// Prefill then continuation, and token-by-token decoding, give the logits of one prefill; a
/// position the cache does not hold is refused. Quantized weights compute a run of 32 or more
/// tokens with the dequantized weight in f32 and fewer with candle's quantized matmul (which
/// rounds the activations to 8 bits): the two agree to ~1e-2 on the tiny model, so GGUF gets a
/// looser bound (a wrong KV cache is off by whole units).
#[test]
fn kv_cache_continuation_matches_a_full_prefill() {
    let tmp = tempfile::tempdir().unwrap();
    let mut specs = Vec::new();
    for arch in [Arch::Qwen2, Arch::Qwen3] {
        let mut o = TinyOptions::new(arch);
        specs.push(folder(tmp.path(), &format!("{arch:?}"), &o));
        o.gguf_dtype = GgmlDType::Q8_0;
        specs.push(gguf(tmp.path(), &format!("{arch:?}.gguf"), &o, &[]));
    }
    for path in specs {
        let tol = if path.extension().is_some_and(|e| e == "gguf") {
            0.1
        } else {
            1e-3
        };
        let mut m = LoadedModel::load(&cpu(&path)).unwrap();
        let ids = m
            .encode("{\"scores\": [{\"trajectory_id\": \"1\", \"score\": 0.5}]}")
            .unwrap();
        assert!(ids.len() > 8);
        let full = m.forward_logits(&ids, 0).unwrap();
        assert_eq!(m.cached_len(), ids.len());
        let k = ids.len() / 2;
        m.forward_logits(&ids[..k], 0).unwrap();
        let cont = m.forward_logits(&ids[k..], k).unwrap();
        assert!(
            max_diff(&full, &cont) < tol,
            "{path:?}: {}",
            max_diff(&full, &cont)
        );
        let mut last = Vec::new();
        for (i, t) in ids.iter().enumerate() {
            last = m.forward_logits(&[*t], i).unwrap();
        }
        assert!(
            max_diff(&full, &last) < tol,
            "{path:?}: {}",
            max_diff(&full, &last)
        );

        let e = m.forward_logits(&ids[..1], 3).unwrap_err();
        assert!(e.to_string().contains("KV cache holds"), "{e}");
        assert_eq!(m.cached_len(), ids.len(), "a refused call keeps the cache");
        m.clear_kv_cache();
        assert_eq!(m.cached_len(), 0);
        let e = m.forward_logits(&[testkit::VOCAB as u32], 0).unwrap_err();
        assert!(e.to_string().contains("outside the vocabulary"), "{e}");
        let e = m
            .forward_logits(&vec![1; testkit::CONTEXT + 1], 0)
            .unwrap_err();
        assert!(e.to_string().contains("exceed the model's context"), "{e}");
        assert!(m.forward_logits(&[], 0).is_err());
    }
}

#[test]
fn real_qwen_templates_render_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let judge = [
        msg("system", "You grade answers."),
        msg("user", "Score these:\n<trajectory id=\"1\">…</trajectory>"),
    ];

    let mut o = TinyOptions::new(Arch::Qwen2);
    o.chat_template = Some(qwen25_template());
    let m = LoadedModel::load(&cpu(&folder(tmp.path(), "q25", &o))).unwrap();
    let t = m.chat_template();
    assert_eq!(t.source(), qwen25_template());
    assert_eq!(
        t.render(&judge).unwrap(),
        "<|im_start|>system\nYou grade answers.<|im_end|>\n<|im_start|>user\nScore these:\n\
         <trajectory id=\"1\">…</trajectory><|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        t.render(&[msg("user", "Hi")]).unwrap(),
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful \
         assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = m.prompt_tokens(&judge).unwrap();
    let start = special_id("<|im_start|>");
    assert_eq!(ids.iter().filter(|&&i| i == start).count(), 3);

    let mut o = TinyOptions::new(Arch::Qwen3);
    o.chat_template = Some(qwen3_template());
    let m = LoadedModel::load(&cpu(&gguf(tmp.path(), "q3.gguf", &o, &[]))).unwrap();
    let t = m.chat_template();
    assert_eq!(t.origin(), &TemplateOrigin::Gguf);
    assert_eq!(
        t.render(&judge).unwrap(),
        "<|im_start|>system\nYou grade answers.<|im_end|>\n<|im_start|>user\nScore these:\n\
         <trajectory id=\"1\">…</trajectory><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
    let turns = [
        msg("user", "2+2?"),
        msg("assistant", "<think>\nadd them\n</think>\n\n4"),
        msg("user", "and 3+3?"),
    ];
    assert_eq!(
        t.render(&turns).unwrap(),
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n\
         and 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
    let no_gen = RenderOptions {
        add_generation_prompt: false,
        enable_thinking: None,
    };
    assert_eq!(
        t.render_with(&turns[..2], &no_gen).unwrap(),
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nadd them\n</think>\n\n\
         4<|im_end|>\n"
    );
    let thinking = RenderOptions {
        add_generation_prompt: true,
        enable_thinking: None,
    };
    assert!(t
        .render_with(&turns[..1], &thinking)
        .unwrap()
        .ends_with("<|im_start|>assistant\n"));
}

#[test]
fn a_model_without_a_template_gets_chatml() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = TinyOptions::new(Arch::Qwen2);
    o.chat_template = None;
    let expected =
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n";
    let messages = [msg("system", "S"), msg("user", "U")];
    for path in [
        folder(tmp.path(), "plain", &o),
        gguf(tmp.path(), "plain.gguf", &o, &[]),
    ] {
        let m = LoadedModel::load(&cpu(&path)).unwrap();
        assert!(m.chat_template().is_fallback(), "{path:?}");
        assert_eq!(m.chat_template().render(&messages).unwrap(), expected);
    }
    // BOS and EOS text reach the template; a GGUF's BOS only when it is added (as in
    // transformers, where Qwen has none).
    o.chat_template = Some("{{ bos_token }}|{{ eos_token }}".into());
    for (adds, bos) in [(false, ""), (true, "<|endoftext|>")] {
        let add = [("tokenizer.ggml.add_bos_token", GgufValue::Bool(adds))];
        let path = gguf(tmp.path(), &format!("bos-{adds}.gguf"), &o, &add);
        let m = LoadedModel::load(&cpu(&path)).unwrap();
        assert_eq!(
            m.chat_template().render(&messages).unwrap(),
            format!("{bos}|<|im_end|>")
        );
    }
    let m = LoadedModel::load(&cpu(&folder(tmp.path(), "bos", &o))).unwrap();
    assert_eq!(m.chat_template().render(&messages).unwrap(), "|<|im_end|>");
    o.chat_template = None;

    // A template in chat_template.jinja beside the config is the model's own.
    let dir = folder(tmp.path(), "jinja", &o);
    std::fs::write(
        dir.join("chat_template.jinja"),
        "{{ messages[0].content }}!",
    )
    .unwrap();
    let m = LoadedModel::load(&cpu(&dir)).unwrap();
    assert!(!m.chat_template().is_fallback());
    assert_eq!(m.chat_template().render(&messages).unwrap(), "S!");
}

#[test]
fn bad_paths_and_folders_fail_at_load_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    assert_eq!(
        load_err(&cpu(&missing)),
        LocalError::NotFound(missing.clone())
    );
    assert!(load_err(&cpu(&missing))
        .to_string()
        .contains("no such file or folder"));

    let o = TinyOptions::new(Arch::Qwen2);
    for (file, named) in [
        ("config.json", "config.json"),
        ("tokenizer.json", "tokenizer.json"),
        ("model.safetensors", "*.safetensors weights"),
    ] {
        let dir = folder(tmp.path(), &format!("no-{file}"), &o);
        std::fs::remove_file(dir.join(file)).unwrap();
        let e = load_err(&cpu(&dir));
        assert_eq!(
            e,
            LocalError::MissingFile {
                dir: dir.clone(),
                file: named.into()
            }
        );
        assert!(
            e.to_string()
                .ends_with(&format!("not a model folder: no {named}")),
            "{e}"
        );
    }

    let mut sharded = o.clone();
    sharded.shards = 2;
    let dir = folder(tmp.path(), "lost-shard", &sharded);
    std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).unwrap();
    let e = load_err(&cpu(&dir));
    assert!(
        matches!(&e, LocalError::MissingShard { file, .. } if file == "model-00002-of-00002.safetensors"),
        "{e}"
    );
    assert!(e.to_string().contains("model.safetensors.index.json: lists weights file model-00002-of-00002.safetensors, which is missing"), "{e}");

    let gguf_dir = tmp.path().join("gguf-dir");
    std::fs::create_dir(&gguf_dir).unwrap();
    gguf(tmp.path(), "gguf-dir/m.gguf", &o, &[]);
    let e = load_err(&cpu(&gguf_dir)).to_string();
    assert!(
        e.contains("no config.json (for a GGUF model, point model_path at "),
        "{e}"
    );
    assert!(e.ends_with("m.gguf)"), "{e}");

    let not_gguf = tmp.path().join("model.bin");
    std::fs::write(&not_gguf, b"PK\x03\x04 not a model").unwrap();
    assert!(load_err(&cpu(&not_gguf))
        .to_string()
        .contains("not a GGUF file"));
    let st = folder(tmp.path(), "st", &o).join("model.safetensors");
    assert!(load_err(&cpu(&st))
        .to_string()
        .contains("point model_path at the model folder"));
    let truncated = tmp.path().join("trunc.gguf");
    std::fs::write(&truncated, b"GGUF\x03\x00\x00\x00").unwrap();
    assert!(load_err(&cpu(&truncated))
        .to_string()
        .contains("not a readable GGUF file"));
}

#[test]
fn unsupported_architectures_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let o = TinyOptions::new(Arch::Qwen2);
    let dir = folder(tmp.path(), "llama", &o);
    let mut cfg = testkit::config_json(Arch::Qwen2, false);
    cfg["model_type"] = "llama".into();
    cfg["architectures"] = serde_json::json!(["LlamaForCausalLM"]);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = load_err(&cpu(&dir));
    assert!(
        matches!(e, LocalError::UnsupportedArchitecture { .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains(
            r#"unsupported architecture model_type "llama", architectures ["LlamaForCausalLM"]"#
        ),
        "{e}"
    );

    let path = gguf(
        tmp.path(),
        "gemma.gguf",
        &o,
        &[("general.architecture", GgufValue::String("gemma3".into()))],
    );
    let e = load_err(&cpu(&path));
    assert!(
        e.to_string().contains(
            r#"unsupported architecture general.architecture "gemma3"; the local judge runs qwen2"#
        ),
        "{e}"
    );

    let path = gguf(
        tmp.path(),
        "llama-bpe.gguf",
        &o,
        &[("tokenizer.ggml.pre", GgufValue::String("llama-bpe".into()))],
    );
    assert!(load_err(&cpu(&path))
        .to_string()
        .contains(r#"tokenizer.ggml.pre is "llama-bpe""#));
    let path = gguf(
        tmp.path(),
        "spm.gguf",
        &o,
        &[("tokenizer.ggml.model", GgufValue::String("llama".into()))],
    );
    assert!(load_err(&cpu(&path))
        .to_string()
        .contains("tokenizer.ggml.model is Some(\"llama\")"));
}

#[test]
fn mismatched_files_fail_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    let o = TinyOptions::new(Arch::Qwen2);

    let dir = folder(tmp.path(), "wide", &o);
    let mut cfg = testkit::config_json(Arch::Qwen2, false);
    cfg["hidden_size"] = 64.into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = load_err(&cpu(&dir)).to_string();
    assert!(e.contains("weights do not fit config.json"), "{e}");

    let dir = folder(tmp.path(), "small-vocab", &o);
    let mut cfg = testkit::config_json(Arch::Qwen2, false);
    cfg["vocab_size"] = 100.into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = load_err(&cpu(&dir)).to_string();
    assert!(e.contains("the tokenizer is not this model's"), "{e}");

    let dir = folder(tmp.path(), "qwen3-config-qwen2-weights", &o);
    std::fs::write(
        dir.join("config.json"),
        testkit::config_json(Arch::Qwen3, false).to_string(),
    )
    .unwrap();
    assert!(load_err(&cpu(&dir))
        .to_string()
        .contains("weights do not fit config.json"));

    let mut broken = o.clone();
    broken.chat_template = Some("{% for m in messages %}{{ m.content }}".into());
    let e = load_err(&cpu(&folder(tmp.path(), "bad-template", &broken))).to_string();
    assert!(
        e.starts_with("chat template (tokenizer_config.json):"),
        "{e}"
    );
}

#[test]
fn device_strings_are_checked_before_the_model_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder(tmp.path(), "m", &TinyOptions::new(Arch::Qwen2));
    let e = load_err(&LocalModelSpec::new(&dir, "gpu0"));
    assert!(matches!(e, LocalError::Device { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("device \"gpu0\": expected \"cpu\" or \"cuda:N\""),
        "{e}"
    );
    if !cfg!(feature = "cuda") {
        let e = load_err(&LocalModelSpec::new(&dir, "cuda:0"));
        assert_eq!(
            e.to_string(),
            "device \"cuda:0\": this gavel was built without CUDA; rebuild with --features cuda"
        );
    }
}

/// A real model, when `GAVEL_TEST_MODEL` names one (a Qwen2.5 0.5B GGUF, or a model folder);
/// `GAVEL_TEST_DEVICE` picks the device (default `cpu`).
#[test]
fn real_model_from_gavel_test_model() {
    let Some(path) = std::env::var_os("GAVEL_TEST_MODEL") else {
        eprintln!(
            "skipped: set GAVEL_TEST_MODEL to a Qwen2.5 0.5B GGUF file or model folder to run"
        );
        return;
    };
    let device = std::env::var("GAVEL_TEST_DEVICE").unwrap_or_else(|_| "cpu".into());
    let t0 = std::time::Instant::now();
    let mut m = LoadedModel::load(&LocalModelSpec::new(PathBuf::from(path), device)).unwrap();
    eprintln!("loaded {:?} in {:?}", m.info(), t0.elapsed());
    for text in ["The verdict: {\"score\": 0.85}", "naïve café — 日本語 🎉\n"] {
        let ids = m.encode(text).unwrap();
        assert_eq!(m.decode(&ids).unwrap(), text);
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&i| m.vocab_bytes()[i as usize].clone())
            .collect();
        assert_eq!(bytes, text.as_bytes());
    }
    let im_end = m.tokenizer().token_to_id("<|im_end|>").expect("<|im_end|>");
    assert!(m.eos_ids().contains(&im_end));
    assert!(m.vocab_bytes()[im_end as usize].is_empty());
    assert!(
        !m.chat_template().is_fallback(),
        "the model should carry its template"
    );
    let judge = [
        msg("system", "You grade answers."),
        msg("user", "Is 2+2=4 right? Answer yes or no."),
    ];
    let prompt = m.chat_template().render(&judge).unwrap();
    assert!(
        prompt.contains("<|im_start|>system\nYou grade answers.<|im_end|>"),
        "{prompt}"
    );
    assert!(prompt.contains("<|im_start|>assistant\n"), "{prompt}");
    let ids = m.prompt_tokens(&judge).unwrap();
    let t0 = std::time::Instant::now();
    let logits = m.forward_logits(&ids, 0).unwrap();
    assert_eq!(logits.len(), m.vocab_size());
    assert!(logits.iter().all(|x| x.is_finite()));
    let best = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0 as u32;
    eprintln!(
        "{} prompt tokens in {:?}; first token {:?}",
        ids.len(),
        t0.elapsed(),
        m.decode(&[best]).unwrap()
    );
    let next = m.forward_logits(&[best], ids.len()).unwrap();
    assert!(next.iter().all(|x| x.is_finite()));
}
