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
}

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
