//! A provider's `ca_file`: the authorities its TLS may chain to beside the built-in web roots
//! (a corporate proxy's, a self-hosted model server's). Read and checked at load, so a missing
//! or empty file is a configuration problem, never a failed call.

use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The client TLS of one provider with its own authorities; equal when the certificates are.
#[derive(Clone)]
pub struct UpstreamTls {
    pub ca_file: String,
    certs: Arc<[CertificateDer<'static>]>,
    pub config: Arc<ClientConfig>,
}

impl UpstreamTls {
    /// `ca_file` (relative to `dir`): every certificate in it, added to the web roots; HTTP/2
    /// and HTTP/1.1 offered by ALPN as on the default client.
    pub fn load(ca_file: &str, dir: &Path) -> Result<UpstreamTls, String> {
        let path = dir.join(ca_file);
        let certs = CertificateDer::pem_file_iter(&path)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|error| {
                format!("cannot read certificates from {}: {error}", path.display())
            })?;
        if certs.is_empty() {
            return Err(format!("{} holds no PEM certificate", path.display()));
        }
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for cert in &certs {
            roots
                .add(cert.clone())
                .map_err(|error| format!("{}: {error}", path.display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(UpstreamTls {
            ca_file: ca_file.to_owned(),
            certs: certs.into(),
            config: Arc::new(config),
        })
    }
}

impl PartialEq for UpstreamTls {
    fn eq(&self, other: &Self) -> bool {
        // The same load's copies share their certificates: no bytes compared.
        Arc::ptr_eq(&self.certs, &other.certs) || self.certs == other.certs
    }
}

impl Eq for UpstreamTls {}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("ca_file", &self.ca_file)
            .field("certificates", &self.certs.len())
            .finish_non_exhaustive()
    }
}
