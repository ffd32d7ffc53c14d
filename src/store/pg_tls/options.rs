//! The TLS options of a connection string: `sslmode` and `sslrootcert` taken out before
//! tokio-postgres parses the rest, with libpq's meanings and its refusals of weak combinations.

use std::path::PathBuf;

use percent_encoding::percent_decode_str;
use tokio_postgres::config::Host;

/// libpq's `sslmode` values, less `allow` (plaintext first, TLS only if refused), which
/// tokio-postgres cannot do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other:?} is not supported (use disable, prefer, require, \
                     verify-ca or verify-full)"
                ))
            }
        })
    }

    /// The driver's mode for the hosts `config` names: as asked, but never TLS on a Unix socket.
    pub fn for_driver(self, config: &tokio_postgres::Config) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        let hosts = config.get_hosts();
        let unix_only = config.get_hostaddrs().is_empty()
            && !hosts.is_empty()
            && hosts.iter().all(|h| !matches!(h, Host::Tcp(_)));
        match self {
            // The server answers a TLS request on a Unix socket with "no", which `require`
            // would turn into an error; libpq never asks there.
            _ if unix_only => Driver::Disable,
            SslMode::Disable => Driver::Disable,
            SslMode::Prefer => Driver::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Driver::Require,
        }
    }
}

/// Where trusted root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store) enum RootCert {
    /// A PEM file of one or more CA certificates.
    File(PathBuf),
    /// `sslrootcert=system`: the operating system's trust store.
    System,
}

/// The TLS options of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store) struct TlsOptions {
    pub mode: SslMode,
    pub root_cert: Option<RootCert>,
}

impl TlsOptions {
    fn new(mode: Option<&str>, root_cert: Option<&str>) -> Result<TlsOptions, String> {
        let root_cert = root_cert.map(|r| match r {
            "system" => RootCert::System,
            path => RootCert::File(PathBuf::from(path)),
        });
        let mode = match (mode, &root_cert) {
            // libpq 16: the system store implies verify-full, and refuses anything weaker (any
            // public CA vouches for some name, so only the name check makes it mean something).
            (None | Some("verify-full"), Some(RootCert::System)) => SslMode::VerifyFull,
            (Some(m), Some(RootCert::System)) => {
                return Err(format!(
                    "sslrootcert=system needs sslmode=verify-full (got sslmode={m})"
                ))
            }
            (None, _) => SslMode::Prefer,
            (Some(m), _) => SslMode::parse(m)?,
        };
        if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
            return Err(format!(
                "sslmode={} needs sslrootcert=FILE (PEM file of the CA that signed the \
                 server's certificate) or sslrootcert=system",
                if mode == SslMode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                }
            ));
        }
        Ok(TlsOptions { mode, root_cert })
    }
}

/// Takes `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL or `key=value` words):
/// the rest, for tokio-postgres, and the TLS options. The last of a repeated option counts, as
/// in libpq. What does not parse is left for tokio-postgres to report.
pub(in crate::store) fn split_options(url: &str) -> Result<(String, TlsOptions), String> {
    let (rest, mode, root) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url(url)?
    } else {
        split_words(url)
    };
    Ok((rest, TlsOptions::new(mode.as_deref(), root.as_deref())?))
}

type Split = (String, Option<String>, Option<String>);

fn split_url(url: &str) -> Result<Split, String> {
    // Where the query starts, found as tokio-postgres finds it: after the first `@` (the
    // credentials may hold a `?`), at the first `?`.
    let after_creds = url.find('@').map_or(0, |i| i + 1);
    let Some(q) = url[after_creds..].find('?').map(|i| after_creds + i) else {
        return Ok((url.to_string(), None, None));
    };
    let (mut mode, mut root) = (None, None);
    let mut kept = Vec::new();
    for pair in url[q + 1..].split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|e| format!("connection URL option {key}: {e}"))
        };
        match decode(key)?.as_str() {
            "sslmode" => mode = Some(decode(value)?),
            "sslrootcert" => root = Some(decode(value)?),
            _ => kept.push(pair),
        }
    }
    let mut rest = url[..q].to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, mode, root))
}

/// `key=value` words, split as tokio-postgres splits them: whitespace between words (and around
/// `=`), values either bare with `\` escapes or in single quotes.
fn split_words(s: &str) -> Split {
    let (mut mode, mut root) = (None, None);
    let mut rest = String::new();
    let mut it = s.char_indices().peekable();
    let mut copied = 0;
    loop {
        while it.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = it.peek() else { break };
        let mut key_end = start;
        while let Some((i, c)) = it.next_if(|(_, c)| !c.is_whitespace() && *c != '=') {
            key_end = i + c.len_utf8();
        }
        let key = &s[start..key_end];
        while it.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if it.next_if(|(_, c)| *c == '=').is_none() {
            break;
        }
        while it.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let quoted = it.next_if(|(_, c)| *c == '\'').is_some();
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = it.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = it.next() {
                        value.push(escaped);
                    }
                }
                '\'' if quoted => {
                    end = Some(i + 1);
                    break;
                }
                c if c.is_whitespace() && !quoted => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = match end {
            Some(end) => end,
            // An unterminated quote: tokio-postgres reports it.
            None if quoted => break,
            None => s.len(),
        };
        match key {
            "sslmode" => mode = Some(value),
            "sslrootcert" => root = Some(value),
            _ => continue,
        }
        rest.push_str(&s[copied..start]);
        copied = end;
    }
    rest.push_str(&s[copied..]);
    (rest, mode, root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> Result<(String, TlsOptions), String> {
        split_options(url)
    }

    fn opts(mode: SslMode, root: Option<RootCert>) -> TlsOptions {
        TlsOptions {
            mode,
            root_cert: root,
        }
    }

    #[test]
    fn url_options_are_taken_out_and_the_rest_kept_as_written() {
        assert_eq!(
            split("postgres://u:p%3Fw@db:5432/g?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem")
                .unwrap(),
            (
                "postgres://u:p%3Fw@db:5432/g?application_name=x".to_string(),
                opts(
                    SslMode::VerifyFull,
                    Some(RootCert::File("/etc/ca.pem".into()))
                )
            )
        );
        // A `?` in the credentials is not the query.
        assert_eq!(
            split("postgresql://u:a?b@db/g?sslmode=require").unwrap(),
            (
                "postgresql://u:a?b@db/g".to_string(),
                opts(SslMode::Require, None)
            )
        );
        assert_eq!(
            split("postgres://db/g").unwrap(),
            ("postgres://db/g".to_string(), opts(SslMode::Prefer, None))
        );
        assert_eq!(
            split("postgres://db/g?sslmode=require&sslmode=disable")
                .unwrap()
                .1,
            opts(SslMode::Disable, None),
            "the last one counts"
        );
    }

    #[test]
    fn keyword_options_are_taken_out_and_the_rest_kept_as_written() {
        assert_eq!(
            split(
                "host=db  sslmode = 'verify-ca' user=gavel sslrootcert='/my certs/ca.pem' dbname=g"
            )
            .unwrap(),
            (
                "host=db   user=gavel  dbname=g".to_string(),
                opts(
                    SslMode::VerifyCa,
                    Some(RootCert::File("/my certs/ca.pem".into()))
                )
            )
        );
        assert_eq!(
            split(r"password='it\'s sslmode=x' sslmode=require").unwrap(),
            (
                r"password='it\'s sslmode=x' ".to_string(),
                opts(SslMode::Require, None)
            )
        );
        assert_eq!(
            split("host=db sslrootcert=/a\\ b.pem sslmode=verify-full").unwrap(),
            (
                "host=db  ".to_string(),
                opts(SslMode::VerifyFull, Some(RootCert::File("/a b.pem".into())))
            )
        );
        let (rest, o) = split("host=db password=x").unwrap();
        assert_eq!(
            (rest.as_str(), o.mode),
            ("host=db password=x", SslMode::Prefer)
        );
    }

    #[test]
    fn modes_follow_libpq_and_weak_combinations_are_refused() {
        let mode = |s: &str| split(s).map(|(_, o)| o.mode);
        assert_eq!(
            mode("postgres://db/g?sslrootcert=system"),
            Ok(SslMode::VerifyFull)
        );
        let e = mode("postgres://db/g?sslrootcert=system&sslmode=require").unwrap_err();
        assert!(e.contains("needs sslmode=verify-full"), "{e}");
        let e = mode("postgres://db/g?sslmode=verify-full").unwrap_err();
        assert!(e.contains("needs sslrootcert=FILE"), "{e}");
        let e = mode("postgres://db/g?sslmode=allow").unwrap_err();
        assert!(e.contains("sslmode=\"allow\" is not supported"), "{e}");
    }

    #[test]
    fn unix_sockets_never_ask_for_tls() {
        use tokio_postgres::config::SslMode as Driver;
        let driver = |url: &str| {
            let (rest, o) = split(url).unwrap();
            o.mode.for_driver(&rest.parse().unwrap())
        };
        assert_eq!(
            driver("postgres:///g?host=/run/postgresql&sslmode=verify-full&sslrootcert=x"),
            Driver::Disable
        );
        assert_eq!(
            driver("postgres://db/g?sslmode=verify-ca&sslrootcert=x"),
            Driver::Require
        );
        assert_eq!(driver("host=db"), Driver::Prefer);
        assert_eq!(driver("host=db sslmode=disable"), Driver::Disable);
    }
}
