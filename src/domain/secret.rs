//! Secrets: a string type that never prints itself, and the redaction of connection URLs for
//! logs and errors. Both config and store use them; neither owns them.

/// A secret string: printed as `[redacted]` everywhere.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the secret replaced by `[redacted]` (some servers quote
    /// the key they refused). A "key" shorter than [`MIN_SCRUBBED_LEN`] is left: a server of
    /// one's own is often given a placeholder such as `x` or `none`, which is no secret, and
    /// replacing it everywhere would turn `text` into `te[redacted]t` in every message.
    pub fn scrub(&self, text: String) -> String {
        if self.0.chars().count() < MIN_SCRUBBED_LEN || !text.contains(&self.0) {
            return text;
        }
        text.replace(&self.0, "[redacted]")
    }
}

/// The shortest secret [`Secret::scrub`] replaces. API keys are 20 characters or more.
pub const MIN_SCRUBBED_LEN: usize = 8;

/// For clap: a secret given on the command line or in an environment variable.
impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The URL with any password replaced by `***` (userinfo or a `password=` option).
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest = &out[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                let start = scheme_end + 3 + colon + 1;
                out.replace_range(start..scheme_end + 3 + at, "***");
            }
        }
    }
    let mut search = 0;
    while let Some(i) = out[search..].find("password=") {
        let start = search + i + "password=".len();
        let end = out[start..]
            .find(['&', ' '])
            .map_or(out.len(), |j| start + j);
        out.replace_range(start..end, "***");
        search = start + 3;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print_themselves() {
        let s = Secret::new("sk-123");
        assert_eq!(format!("{s} {s:?}"), "[redacted] [redacted]");
        assert_eq!(s.expose(), "sk-123");
    }

    #[test]
    fn a_key_is_scrubbed_from_text_but_a_placeholder_is_not() {
        let key = Secret::new("sk-abcdefgh12345");
        assert_eq!(
            key.scrub("Incorrect API key provided: sk-abcdefgh12345.".into()),
            "Incorrect API key provided: [redacted]."
        );
        // `x` for a local server: the message keeps its words.
        let placeholder = Secret::new("x");
        let text = "Input should be 'text' or 'json_object'".to_string();
        assert_eq!(placeholder.scrub(text.clone()), text);
        assert_eq!(
            Secret::new("1234567").scrub("a 1234567".into()),
            "a 1234567"
        );
        assert_eq!(
            Secret::new("12345678").scrub("a 12345678".into()),
            "a [redacted]"
        );
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://gavel:s3cr3t@db:5432/gavel"),
            "postgres://gavel:***@db:5432/gavel"
        );
        assert_eq!(
            redact_url("postgres://gavel@db/gavel?password=s3cr3t&sslmode=disable"),
            "postgres://gavel@db/gavel?password=***&sslmode=disable"
        );
        assert_eq!(
            redact_url("host=db user=gavel password=s3cr3t dbname=g"),
            "host=db user=gavel password=*** dbname=g"
        );
        assert_eq!(redact_url("postgres://db/gavel"), "postgres://db/gavel");
        assert_eq!(
            redact_url("postgresql:///g?host=/tmp/pg@x"),
            "postgresql:///g?host=/tmp/pg@x"
        );
    }
}
