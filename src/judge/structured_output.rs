//! `structured_output`: how a judge's verdict is held to its JSON schema. OpenAI-compatible
//! servers each take another dialect of `response_format` (OpenAI and vLLM `json_schema`,
//! llama-cpp-python `json_object` with a `schema`, some only plain JSON mode), and answer the
//! others with an error, so a remote judge set to `auto` starts at the strictest and steps down
//! the first time its server refuses one (see `remote::RemoteJudge`). A local judge's
//! constrained decoding is on for anything but `off`.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::{json, Value};

/// A judge's `structured_output` setting, and (never `Auto`) the dialect a judge uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StructuredOutput {
    /// `json_schema`, and down the ladder ([`StructuredOutput::next`]) when the server refuses.
    #[default]
    Auto,
    /// `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`: OpenAI, vLLM,
    /// SGLang, llama.cpp's server.
    JsonSchema,
    /// `{"type": "json_object", "schema": …}`: llama-cpp-python's server (and llama.cpp's).
    JsonObject,
    /// `{"type": "json_object"}`: valid JSON, not held to the schema.
    JsonMode,
    /// No `response_format`: the prompt spells the reply's shape out.
    Off,
}

impl StructuredOutput {
    /// Every value, in the order `auto` tries the dialects.
    pub const ALL: [StructuredOutput; 5] = [
        StructuredOutput::Auto,
        StructuredOutput::JsonSchema,
        StructuredOutput::JsonObject,
        StructuredOutput::JsonMode,
        StructuredOutput::Off,
    ];

    /// Its name in a config file, `/healthz` and the logs.
    pub fn name(self) -> &'static str {
        match self {
            StructuredOutput::Auto => "auto",
            StructuredOutput::JsonSchema => "json_schema",
            StructuredOutput::JsonObject => "json_object",
            StructuredOutput::JsonMode => "json_mode",
            StructuredOutput::Off => "off",
        }
    }

    /// Reads a name, or `true` (auto) / `false` (off) as the key was first written.
    pub fn parse(text: &str) -> Option<StructuredOutput> {
        match text.trim() {
            "true" => Some(StructuredOutput::Auto),
            "false" => Some(StructuredOutput::Off),
            t => Self::ALL.into_iter().find(|s| s.name() == t),
        }
    }

    /// The dialect a judge starts with: `auto` tries `json_schema` first.
    pub fn first(self) -> StructuredOutput {
        match self {
            StructuredOutput::Auto => StructuredOutput::JsonSchema,
            s => s,
        }
    }

    /// The dialect `auto` tries after this one is refused; `None` after `off`.
    pub fn next(self) -> Option<StructuredOutput> {
        match self {
            StructuredOutput::Auto => Some(StructuredOutput::JsonSchema),
            StructuredOutput::JsonSchema => Some(StructuredOutput::JsonObject),
            StructuredOutput::JsonObject => Some(StructuredOutput::JsonMode),
            StructuredOutput::JsonMode => Some(StructuredOutput::Off),
            StructuredOutput::Off => None,
        }
    }

    /// Whether a reply in this dialect is held to the verdict's schema (then the listwise prompt
    /// need not spell the shape out).
    pub fn holds_schema(self) -> bool {
        matches!(
            self,
            StructuredOutput::Auto | StructuredOutput::JsonSchema | StructuredOutput::JsonObject
        )
    }

    /// The request's `response_format` for a verdict held to `schema`, `None` when off.
    pub fn response_format(self, schema: &Value) -> Option<Value> {
        match self.first() {
            StructuredOutput::JsonSchema => Some(json!({
                "type": "json_schema",
                "json_schema": {
                    "name": "verdict",
                    "description": "Scores for each trajectory",
                    "schema": schema,
                    "strict": true,
                },
            })),
            StructuredOutput::JsonObject => Some(json!({"type": "json_object", "schema": schema})),
            StructuredOutput::JsonMode => Some(json!({"type": "json_object"})),
            StructuredOutput::Auto | StructuredOutput::Off => None,
        }
    }

    /// The value a judge's identity (part of every cache key) records: `true` and `false` for
    /// `json_schema` and `off`, as the key was written before there were dialects, so verdicts
    /// cached then stay valid; the name for the others.
    pub fn identity(self) -> Value {
        match self.first() {
            StructuredOutput::JsonSchema => Value::Bool(true),
            StructuredOutput::Off => Value::Bool(false),
            s => Value::String(s.name().into()),
        }
    }
}

impl fmt::Display for StructuredOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a server's refusal (HTTP `status`, reply `body`) is a refusal of the request's
/// `response_format`, as opposed to a failure any request would meet. Servers say so in the
/// body: llama-cpp-python answers 500 with a validation error at `response_format.type`
/// ("Input should be 'text' or 'json_object'"), OpenAI 400 "Invalid parameter:
/// 'response_format' of type 'json_schema' is not supported with this model", vLLM 400 naming
/// `json_schema`. Rate limits, timeouts, key refusals and gateways' 502–504 never are.
pub fn refuses_format(status: u16, body: &str) -> bool {
    let client_or_server = (400..500).contains(&status) || status == 500;
    if !client_or_server || matches!(status, 401 | 403 | 408 | 409 | 429) {
        return false;
    }
    let b = body.to_ascii_lowercase();
    ["response_format", "json_schema", "json_object"]
        .iter()
        .any(|w| b.contains(w))
}

impl<'de> Deserialize<'de> for StructuredOutput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StructuredOutput;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"auto\", \"json_schema\", \"json_object\", \"json_mode\" or \"off\"")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<StructuredOutput, E> {
                Ok(if v {
                    StructuredOutput::Auto
                } else {
                    StructuredOutput::Off
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StructuredOutput, E> {
                StructuredOutput::parse(v)
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_steps_down_from_the_strictest_dialect_to_none() {
        let mut seen = vec![];
        let mut s = Some(StructuredOutput::Auto.first());
        while let Some(d) = s {
            seen.push(d.name());
            s = d.next();
        }
        assert_eq!(seen, ["json_schema", "json_object", "json_mode", "off"]);
    }

    #[test]
    fn each_dialect_writes_its_response_format() {
        let schema = json!({"type": "object"});
        let rf = |s: StructuredOutput| s.response_format(&schema);
        assert_eq!(rf(StructuredOutput::Auto).unwrap()["type"], "json_schema");
        assert_eq!(
            rf(StructuredOutput::JsonSchema).unwrap()["json_schema"]["schema"],
            schema
        );
        assert_eq!(
            rf(StructuredOutput::JsonObject).unwrap(),
            json!({"type": "json_object", "schema": schema})
        );
        assert_eq!(
            rf(StructuredOutput::JsonMode).unwrap(),
            json!({"type": "json_object"})
        );
        assert!(rf(StructuredOutput::Off).is_none());
        assert!(
            !StructuredOutput::JsonMode.holds_schema() && !StructuredOutput::Off.holds_schema()
        );
    }

    #[test]
    fn read_from_a_name_or_the_old_boolean() {
        #[derive(Deserialize)]
        struct T {
            s: StructuredOutput,
        }
        let read = |v: &str| toml::from_str::<T>(&format!("s = {v}")).map(|t| t.s);
        assert_eq!(read("true").unwrap(), StructuredOutput::Auto);
        assert_eq!(read("false").unwrap(), StructuredOutput::Off);
        assert_eq!(
            read("\"json_object\"").unwrap(),
            StructuredOutput::JsonObject
        );
        let e = read("\"json\"").unwrap_err().to_string();
        assert!(e.contains("expected \"auto\", \"json_schema\""), "{e}");
        // The cache key of the old `true` and `false` is unchanged.
        assert_eq!(StructuredOutput::Auto.identity(), json!(true));
        assert_eq!(StructuredOutput::Off.identity(), json!(false));
        assert_eq!(
            StructuredOutput::JsonObject.identity(),
            json!("json_object")
        );
    }

    #[test]
    fn only_a_refusal_that_names_the_format_steps_down() {
        let llama_cpp_python = r#"{"detail":[{"type":"literal_error","loc":["body","response_format","type"],"msg":"Input should be 'text' or 'json_object'"}]}"#;
        assert!(refuses_format(500, llama_cpp_python));
        assert!(refuses_format(
            400,
            "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
        ));
        assert!(!refuses_format(400, "model not found"));
        assert!(!refuses_format(429, "response_format rate limit"));
        assert!(!refuses_format(503, "json_schema backend overloaded"));
        assert!(!refuses_format(401, "response_format"));
    }
}
