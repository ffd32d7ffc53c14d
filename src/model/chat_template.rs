//! The model's own chat template, rendered with minijinja the way `transformers` renders it
//! (`trim_blocks`, `lstrip_blocks`, Python string methods, a Python-style `tojson`,
//! `raise_exception`), so a judge prompt reaches the model in exactly the form of its training
//! data. A ChatML fallback is used only when the model carries no template.

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde::Serialize;

use super::error::{one_line, LocalError};
use crate::domain::prompt::ChatMessage;

/// ChatML, as Qwen writes it, for a model without a template of its own.
pub const CHATML_FALLBACK: &str =
    "{%- for message in messages %}{{- '<|im_start|>' + message.role \
    + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}\
    {{- '<|im_start|>assistant\\n' }}{%- endif %}";

/// Where a chat template came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateOrigin {
    /// `chat_template` of `tokenizer_config.json` (or `chat_template.jinja` beside it).
    TokenizerConfig,
    /// `tokenizer.chat_template` of a GGUF file.
    Gguf,
    /// The model has none: [`CHATML_FALLBACK`].
    Fallback,
}

/// How to render: what `add_generation_prompt` and `enable_thinking` are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    pub add_generation_prompt: bool,
    /// `None` leaves `enable_thinking` undefined, which templates read as their default.
    pub enable_thinking: Option<bool>,
}

impl Default for RenderOptions {
    /// A judge prompt: the assistant turn opened, thinking off (the verdict is constrained from
    /// its first token, so a Qwen3 must not open a `<think>` block).
    fn default() -> Self {
        RenderOptions {
            add_generation_prompt: true,
            enable_thinking: Some(false),
        }
    }
}

/// A compiled chat template with the model's BOS and EOS text.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    origin: TemplateOrigin,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("source_len", &self.source.len())
            .finish()
    }
}

const NAME: &str = "chat_template";

fn origin_name(origin: &TemplateOrigin) -> &'static str {
    match origin {
        TemplateOrigin::TokenizerConfig => "tokenizer_config.json",
        TemplateOrigin::Gguf => "GGUF tokenizer.chat_template",
        TemplateOrigin::Fallback => "built-in ChatML",
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=None)` as `transformers`' `tojson`
/// filter calls it: `", "` and `": "` separators, no HTML escaping, keys in insertion order.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let mut out = String::new();
    let opts = (
        indent,
        sort_keys.unwrap_or(false),
        ensure_ascii.unwrap_or(false),
    );
    py_json(&json, opts, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn py_string(s: &str, ensure_ascii: bool, out: &mut String) {
    let quoted = serde_json::Value::from(s).to_string();
    if !ensure_ascii {
        out.push_str(&quoted);
        return;
    }
    for c in quoted.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u16; 2];
            for u in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
}

fn py_json(
    v: &serde_json::Value,
    opts: (Option<usize>, bool, bool),
    level: usize,
    out: &mut String,
) {
    let (indent, sort_keys, ensure_ascii) = opts;
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        serde_json::Value::String(s) => py_string(s, ensure_ascii, out),
        serde_json::Value::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                py_json(x, opts, level + 1, out);
            }
            newline(out, level);
            out.push(']');
        }
        serde_json::Value::Object(o) if !o.is_empty() => {
            let mut entries: Vec<(&String, &serde_json::Value)> = o.iter().collect();
            if sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, x)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                py_string(k, ensure_ascii, out);
                out.push_str(": ");
                py_json(x, opts, level + 1, out);
            }
            newline(out, level);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

impl ChatTemplate {
    /// Compiles `source`; a syntax error is reported here, at load, not at the first request.
    pub fn new(
        source: impl Into<String>,
        origin: TemplateOrigin,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<ChatTemplate, LocalError> {
        let source = source.into();
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error(&origin, &e))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.clone())
            .map_err(|e| template_error(&origin, &e))?;
        Ok(ChatTemplate {
            env,
            source,
            origin,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// The built-in ChatML template.
    pub fn chatml(bos_token: &str, eos_token: &str) -> ChatTemplate {
        ChatTemplate::new(
            CHATML_FALLBACK,
            TemplateOrigin::Fallback,
            bos_token,
            eos_token,
        )
        .expect("the built-in ChatML template compiles")
    }

    /// The model's template, or ChatML when it has none (`source` is `None`).
    pub fn from_model(
        source: Option<String>,
        origin: TemplateOrigin,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, LocalError> {
        match source {
            Some(s) => ChatTemplate::new(s, origin, bos_token, eos_token),
            None => Ok(ChatTemplate::chatml(bos_token, eos_token)),
        }
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    /// Whether this is the built-in ChatML, the model having no template.
    pub fn is_fallback(&self) -> bool {
        self.origin == TemplateOrigin::Fallback
    }

    /// Renders a judge prompt with [`RenderOptions::default`]: the assistant turn opened and
    /// thinking off.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String, LocalError> {
        self.render_with(messages, &RenderOptions::default())
    }

    /// Renders `messages` (role/content dicts) with the template's variables: `messages`,
    /// `add_generation_prompt`, `bos_token`, `eos_token` and, when set, `enable_thinking`.
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        opts: &RenderOptions,
    ) -> Result<String, LocalError> {
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| template_error(&self.origin, &e))?;
        let mut ctx = minijinja::context! {
            messages => Value::from(minijinja::value::Serde(messages)),
            add_generation_prompt => opts.add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        if let Some(t) = opts.enable_thinking {
            ctx = minijinja::context! { enable_thinking => t, ..ctx };
        }
        template
            .render(ctx)
            .map_err(|e| template_error(&self.origin, &e))
    }
}

fn template_error(origin: &TemplateOrigin, e: &Error) -> LocalError {
    let detail = e
        .detail()
        .map(str::to_string)
        .unwrap_or_else(|| e.kind().to_string());
    let at = e
        .line()
        .map(|l| format!(" at line {l}"))
        .unwrap_or_default();
    LocalError::Template {
        source_name: origin_name(origin).to_string(),
        message: one_line(&format!("{detail}{at}")),
    }
}

/// The template a `tokenizer_config.json` carries: `chat_template` as a string, or the
/// `"default"` entry of a list of `{name, template}`.
pub fn template_from_tokenizer_config(
    config: &serde_json::Value,
) -> Result<Option<String>, String> {
    match &config["chat_template"] {
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        serde_json::Value::Array(list) => list
            .iter()
            .find(|t| t["name"] == "default")
            .and_then(|t| t["template"].as_str())
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| "chat_template is a list without a \"default\" template".to_string()),
        serde_json::Value::Null => Ok(None),
        other => Err(format!("chat_template is not a string or list: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
        pairs
            .iter()
            .map(|(r, c)| ChatMessage {
                role: r.to_string(),
                content: c.to_string(),
            })
            .collect()
    }

    #[test]
    fn chatml_fallback_renders_qwen_turns() {
        let t = ChatTemplate::chatml("", "<|im_end|>");
        let out = t
            .render(&msgs(&[("system", "S"), ("user", "Hi\nthere")]))
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n\
             <|im_start|>assistant\n"
        );
        assert!(t.is_fallback());
        let opts = RenderOptions {
            add_generation_prompt: false,
            enable_thinking: None,
        };
        let out = t.render_with(&msgs(&[("user", "x")]), &opts).unwrap();
        assert_eq!(out, "<|im_start|>user\nx<|im_end|>\n");
    }

    #[test]
    fn python_methods_tojson_and_raise_exception() {
        let src = "{{ messages[0].content.strip().split(',')[1].startswith('b') }}|\
                   {{ {'a': [1, 'é<'], 'b': none} | tojson }}|{{ 'x' | tojson(indent=2) }}|\
                   {{ [1, {'k': 2}] | tojson(indent=2) }}|{{ bos_token }}{{ eos_token }}";
        let t = ChatTemplate::new(src, TemplateOrigin::Gguf, "<s>", "</s>").unwrap();
        let out = t.render(&msgs(&[("user", "  a,b ")])).unwrap();
        assert_eq!(
            out,
            "True|{\"a\": [1, \"é<\"], \"b\": null}|\"x\"|[\n  1,\n  {\n    \"k\": 2\n  }\n]|<s></s>"
        );
        let t = ChatTemplate::new(
            "{{ raise_exception('roles must alternate') }}",
            TemplateOrigin::TokenizerConfig,
            "",
            "",
        )
        .unwrap();
        let e = t.render(&msgs(&[])).unwrap_err().to_string();
        assert!(e.contains("roles must alternate"), "{e}");
        assert!(
            e.starts_with("chat template (tokenizer_config.json)"),
            "{e}"
        );
    }

    #[test]
    fn syntax_errors_are_reported_at_compile_time() {
        let e = ChatTemplate::new("{% for m in messages %}", TemplateOrigin::Gguf, "", "")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("chat template (GGUF tokenizer.chat_template):"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn template_from_config_string_or_named_list() {
        let c = serde_json::json!({"chat_template": "A"});
        assert_eq!(template_from_tokenizer_config(&c).unwrap().unwrap(), "A");
        let c = serde_json::json!({"chat_template": [
            {"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]});
        assert_eq!(template_from_tokenizer_config(&c).unwrap().unwrap(), "D");
        let c = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "T"}]});
        assert!(template_from_tokenizer_config(&c).is_err());
        assert_eq!(
            template_from_tokenizer_config(&serde_json::json!({})).unwrap(),
            None
        );
    }
}
