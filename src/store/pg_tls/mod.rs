//! TLS for the Postgres store: libpq's `sslmode` and `sslrootcert` connection options over
//! rustls (the TLS stack gavel's HTTP client already uses).
//!
//! tokio-postgres itself knows `sslmode` `disable`, `prefer` and `require` only, and no root
//! certificates, so [`split_options`] takes both options out of the connection string before
//! the driver parses the rest, and [`MakeRustls`] does what they ask:
//!
//! | `sslmode` | encrypted | certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers TLS | no |
//! | `require` | always | no (with `sslrootcert`: chain, as `verify-ca`) |
//! | `verify-ca` | always | chain up to `sslrootcert` |
//! | `verify-full` | always | chain, and the host name |
//!
//! These are libpq's meanings, so a URL that works with `psql` means the same here. Over a Unix
//! socket there is never TLS, whatever the mode (as in libpq: the socket does not leave the
//! machine, and the server refuses TLS on it).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::Digest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

mod options;

pub(super) use options::split_options;
use options::{RootCert, SslMode, TlsOptions};

/// tokio-postgres's TLS hook over rustls, made once per pool from its [`TlsOptions`].
#[derive(Clone)]
pub(super) struct MakeRustls {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for MakeRustls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MakeRustls")
    }
}

impl MakeRustls {
    /// Reads any root certificates now, so a missing or unreadable file stops start-up.
    pub fn new(options: &TlsOptions) -> Result<MakeRustls, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (&options.root_cert, options.mode) {
            (_, SslMode::Disable) | (None, _) => Arc::new(Verifier {
                roots: None,
                check_name: false,
                algorithms: provider.signature_verification_algorithms,
            }),
            (Some(RootCert::System), _) => Arc::new(
                rustls_platform_verifier::Verifier::new(provider.clone())
                    .map_err(|e| format!("sslrootcert=system: {e}"))?,
            ),
            (Some(RootCert::File(path)), mode) => Arc::new(Verifier {
                roots: Some(read_roots(path)?),
                check_name: mode == SslMode::VerifyFull,
                algorithms: provider.signature_verification_algorithms,
            }),
        };
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        // What libpq 17 sends; a server of 17 or later needs it for `sslnegotiation=direct`,
        // older ones ignore it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(MakeRustls {
            config: Arc::new(config),
        })
    }
}

fn read_roots(path: &std::path::Path) -> Result<RootCertStore, String> {
    let at = || format!("sslrootcert {}", path.display());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| format!("{}: {e}", at()))? {
        let cert = cert.map_err(|e| format!("{}: {e}", at()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: not a usable CA certificate: {e}", at()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no PEM certificate in it", at()));
    }
    Ok(roots)
}

/// The server-certificate check for every mode but `sslrootcert=system`.
#[derive(Debug)]
struct Verifier {
    /// `None` (`prefer` and `require` without `sslrootcert`): any certificate is accepted.
    /// That is libpq's `require`: the connection is encrypted against eavesdroppers, but whoever
    /// answers at the address is believed to be the server; `verify-full` guards against that.
    roots: Option<RootCertStore>,
    /// `verify-full`: the certificate must also name the host connected to.
    check_name: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
            if self.check_name {
                rustls::client::verify_server_name(&cert, server_name)?;
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    // The handshake signatures are checked in every mode, even when the certificate is not:
    // they prove the server holds the key of the certificate it sent, which the channel binding
    // below relies on.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = Infallible;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnect, Infallible> {
        // The driver asks for a connector before it knows whether TLS will be used, with an
        // empty host for a Unix socket; a name rustls cannot use only fails a TLS handshake.
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("host {host:?} cannot be checked against a certificate: {e}"));
        Ok(RustlsConnect {
            config: self.config.clone(),
            name,
        })
    }
}

pub(super) struct RustlsConnect {
    config: Arc<ClientConfig>,
    name: Result<ServerName<'static>, String>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let name = self
                .name
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let tls = tokio_rustls::TlsConnector::from(self.config)
                .connect(name, stream)
                .await?;
            Ok(RustlsStream(tls))
        })
    }
}

pub(super) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S> TlsStream for RustlsStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// SCRAM-SHA-256-PLUS binds the password exchange to this server's certificate, so a
    /// man in the middle that `require` lets through cannot relay the login.
    fn channel_binding(&self) -> ChannelBinding {
        let (_, conn) = self.0.get_ref();
        match conn
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| end_point_hash(c))
        {
            Some(hash) => ChannelBinding::tls_server_end_point(hash),
            None => ChannelBinding::none(),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// RFC 5929's `tls-server-end-point` binding data: the certificate hashed with the hash of its
/// own signature algorithm, MD5 and SHA-1 raised to SHA-256 (what PostgreSQL computes on its
/// side). `None` when the algorithm names no single hash (RSA-PSS, Ed25519) or the certificate
/// does not parse: the login then goes without channel binding.
fn end_point_hash(cert: &[u8]) -> Option<Vec<u8>> {
    // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm SEQUENCE { OID, ... }, ... }
    let (0x30, cert_body, _) = der(cert)? else {
        return None;
    };
    let (_, _tbs, after_tbs) = der(cert_body)?;
    let (0x30, algorithm, _) = der(after_tbs)? else {
        return None;
    };
    let (0x06, oid, _) = der(algorithm)? else {
        return None;
    };
    const PKCS1: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04];
    let bits = match (oid.strip_prefix(PKCS1), oid.strip_prefix(ECDSA)) {
        // md5, sha1 | sha256 ... WithRSAEncryption
        (Some([0x04 | 0x05 | 0x0B]), _) => 256,
        (Some([0x0C]), _) => 384,
        (Some([0x0D]), _) => 512,
        (Some([0x0E]), _) => 224,
        // ecdsa-with-SHA1 | ecdsa-with-SHA256 ...
        (_, Some([0x01] | [0x03, 0x02])) => 256,
        (_, Some([0x03, 0x03])) => 384,
        (_, Some([0x03, 0x04])) => 512,
        (_, Some([0x03, 0x01])) => 224,
        _ => return None,
    };
    Some(match bits {
        224 => sha2::Sha224::digest(cert).to_vec(),
        256 => sha2::Sha256::digest(cert).to_vec(),
        384 => sha2::Sha384::digest(cert).to_vec(),
        _ => sha2::Sha512::digest(cert).to_vec(),
    })
}

/// One DER element at the start of `input`: (tag, contents, what follows).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7F);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_certificate_file_that_cannot_be_read_stops_start_up() {
        let (_, o) =
            split_options("postgres://db/g?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem")
                .unwrap();
        let e = MakeRustls::new(&o).unwrap_err();
        assert!(e.contains("sslrootcert /nonexistent/ca.pem"), "{e}");
    }

    /// A certificate-shaped DER: SEQUENCE { SEQUENCE {}, SEQUENCE { OID }, BIT STRING }.
    fn cert_signed_with(oid: &[u8]) -> Vec<u8> {
        let mut alg = vec![0x06, oid.len() as u8];
        alg.extend_from_slice(oid);
        let mut body = vec![0x30, 0x00, 0x30, alg.len() as u8];
        body.extend_from_slice(&alg);
        body.extend_from_slice(&[0x03, 0x01, 0x00]);
        let mut cert = vec![0x30, body.len() as u8];
        cert.extend_from_slice(&body);
        cert
    }

    #[test]
    fn the_channel_binding_hash_follows_the_signature_algorithm() {
        let sha256_rsa = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0B];
        let sha1_rsa = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x05];
        let ecdsa_sha384 = [0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x03];
        let rsa_pss = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0A];
        let ed25519 = [0x2B, 0x65, 0x70];
        let c = cert_signed_with(&sha256_rsa);
        assert_eq!(end_point_hash(&c), Some(sha2::Sha256::digest(&c).to_vec()));
        let c = cert_signed_with(&sha1_rsa);
        assert_eq!(end_point_hash(&c), Some(sha2::Sha256::digest(&c).to_vec()));
        let c = cert_signed_with(&ecdsa_sha384);
        assert_eq!(end_point_hash(&c), Some(sha2::Sha384::digest(&c).to_vec()));
        assert_eq!(end_point_hash(&cert_signed_with(&rsa_pss)), None);
        assert_eq!(end_point_hash(&cert_signed_with(&ed25519)), None);
        let c = cert_signed_with(&sha256_rsa);
        assert_eq!(end_point_hash(&c[..c.len() - 1]), None, "truncated");
        assert_eq!(end_point_hash(b"not DER"), None);
    }
}
