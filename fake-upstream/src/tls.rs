//! HTTPS for the fake upstream, as real providers serve: TLS with HTTP/2 and HTTP/1.1 offered
//! by ALPN. Each start makes its own certificate authority and a server certificate it signs for
//! `127.0.0.1` and `localhost`; a client trusts the authority's PEM (`FakeTls::ca_pem`), never
//! the system's roots, so nothing outside the test can present it.

use std::io;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A fresh authority and the server configuration that presents a certificate it signed.
#[derive(Clone)]
pub struct FakeTls {
    ca_pem: String,
    server: Arc<ServerConfig>,
}

impl FakeTls {
    pub fn generate() -> io::Result<FakeTls> {
        let ca_key = KeyPair::generate().map_err(io::Error::other)?;
        let mut ca_params = CertificateParams::new(Vec::new()).map_err(io::Error::other)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tollgate fake upstream CA");
        let ca = ca_params.self_signed(&ca_key).map_err(io::Error::other)?;

        let leaf_key = KeyPair::generate().map_err(io::Error::other)?;
        let leaf_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(io::Error::other)?;
        let leaf = leaf_params
            .signed_by(&leaf_key, &ca, &ca_key)
            .map_err(io::Error::other)?;

        let chain = vec![leaf.der().clone(), CertificateDer::from(ca.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(io::Error::other)?;
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(FakeTls {
            ca_pem: ca.pem(),
            server: Arc::new(server),
        })
    }

    /// The authority's certificate, PEM: what a client adds to its roots to trust this fake.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub(crate) fn server_config(&self) -> ServerConfig {
        (*self.server).clone()
    }
}
