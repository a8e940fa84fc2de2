//! The pool's certificates: a CA derived from the pool secret, and a certificate per
//! endpoint issued by it.
//!
//! Every member of a pool knows the pool's secret, so every member can derive the same
//! CA key pair: an Ed25519 key whose seed is `HKDF-SHA256(salt = "ipl-quic pool CA v1",
//! ikm = the secret's 64 hex digits, info = the pool name)`. The CA certificate is built
//! from fixed parameters, so it is the same everywhere. Each endpoint makes a fresh
//! Ed25519 key pair and has the CA sign a certificate for the DNS name
//! `ep-<id in 16 hex>.ipl-quic`. Both sides of a connection present their certificate
//! (mutual TLS) and verify the other's with the standard rustls/webpki verifiers, whose
//! only root is the pool CA; a client also checks that the server's certificate names the
//! endpoint id of the address it dialed. A process without the secret cannot produce a
//! certificate the pool accepts and is refused in the handshake. There is no way to turn
//! verification off.

use std::sync::Arc;

use ipl_auth::PoolSecret;
use ipl_transport_abi::TransportError;
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{ClientConfig, ServerConfig, TransportConfig};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use crate::wire::ALPN;

/// HKDF salt of the CA key derivation (changing it changes every pool's CA).
const CA_SALT: &[u8] = b"ipl-quic pool CA v1";

/// PKCS#8 v1 prefix of an Ed25519 private key; the 32-byte seed follows.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

fn tls_err(what: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Other(format!("quic tls: {what}: {e}"))
}

/// The DNS name in the certificate of endpoint `id`, which a client asks for (SNI) and
/// checks when it dials that endpoint.
pub fn server_name(id: u64) -> String {
    format!("ep-{id:016x}.ipl-quic")
}

/// One endpoint's certificate and key.
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Identity(..)")
    }
}

impl Identity {
    fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key.clone_key())
    }
}

/// The pool's CA, able to issue endpoint certificates and to build TLS configurations
/// that trust exactly this pool.
pub struct PoolTls {
    ca_key: KeyPair,
    ca: rcgen::Certificate,
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl std::fmt::Debug for PoolTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PoolTls(..)")
    }
}

impl PoolTls {
    /// Derives the CA of pool `pool` with secret `secret`.
    pub fn new(secret: &PoolSecret, pool: &str) -> Result<Self, TransportError> {
        let mut seed = [0u8; 32];
        let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, CA_SALT);
        let info = [pool.as_bytes()];
        salt.extract(secret.to_hex().as_bytes())
            .expand(&info, ring::hkdf::HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut seed))
            .map_err(|_| tls_err("deriving the pool CA key", "HKDF failed"))?;
        let mut pkcs8 = Vec::with_capacity(48);
        pkcs8.extend_from_slice(&ED25519_PKCS8_PREFIX);
        pkcs8.extend_from_slice(&seed);
        let ca_key = KeyPair::from_pkcs8_der_and_sign_algo(
            &PrivatePkcs8KeyDer::from(pkcs8),
            &rcgen::PKCS_ED25519,
        )
        .map_err(|e| tls_err("pool CA key", e))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "ipl-quic pool CA");
        params.distinguished_name = dn;
        params.serial_number = Some(SerialNumber::from(1u64));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params
            .self_signed(&ca_key)
            .map_err(|e| tls_err("pool CA certificate", e))?;
        let mut roots = RootCertStore::empty();
        roots
            .add(ca.der().clone())
            .map_err(|e| tls_err("pool CA as trust anchor", e))?;
        Ok(PoolTls {
            ca_key,
            ca,
            roots: Arc::new(roots),
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        })
    }

    /// Issues a certificate for endpoint `id` (a fresh key pair).
    pub fn identity(&self, id: u64) -> Result<Identity, TransportError> {
        let key =
            KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| tls_err("endpoint key", e))?;
        let name = server_name(id);
        let mut params =
            CertificateParams::new(vec![name.clone()]).map_err(|e| tls_err("endpoint name", e))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .map_err(|e| tls_err("endpoint certificate", e))?;
        Ok(Identity {
            chain: vec![cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
        })
    }

    /// The rustls server configuration: presents `me`, requires a client certificate
    /// issued by the pool CA.
    pub fn rustls_server(&self, me: &Identity) -> Result<rustls::ServerConfig, TransportError> {
        let verifier =
            WebPkiClientVerifier::builder_with_provider(self.roots.clone(), self.provider.clone())
                .build()
                .map_err(|e| tls_err("client verifier", e))?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_err("server protocol versions", e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(me.chain.clone(), me.key())
            .map_err(|e| tls_err("server certificate", e))?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }

    /// The rustls client configuration: presents `me`, trusts only servers whose
    /// certificate was issued by the pool CA.
    pub fn rustls_client(&self, me: &Identity) -> Result<rustls::ClientConfig, TransportError> {
        let mut cfg = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_err("client protocol versions", e))?
            .with_root_certificates(self.roots.clone())
            .with_client_auth_cert(me.chain.clone(), me.key())
            .map_err(|e| tls_err("client certificate", e))?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }

    /// The QUIC server configuration (quinn-proto's, which quinn re-exports; see
    /// [`rustls_server`](Self::rustls_server)).
    pub fn server_config(
        &self,
        me: &Identity,
        transport: Arc<TransportConfig>,
    ) -> Result<ServerConfig, TransportError> {
        let crypto = QuicServerConfig::try_from(self.rustls_server(me)?)
            .map_err(|e| tls_err("quic server crypto", e))?;
        let mut cfg = ServerConfig::with_crypto(Arc::new(crypto));
        cfg.transport_config(transport);
        Ok(cfg)
    }

    /// The QUIC client configuration (quinn-proto's, which quinn re-exports; see
    /// [`rustls_client`](Self::rustls_client)).
    pub fn client_config(
        &self,
        me: &Identity,
        transport: Arc<TransportConfig>,
    ) -> Result<ClientConfig, TransportError> {
        quic_client(self.rustls_client(me)?, transport)
    }
}

/// Wraps a rustls client configuration for QUIC (quinn-proto's configuration, which
/// quinn re-exports).
pub fn quic_client(
    cfg: rustls::ClientConfig,
    transport: Arc<TransportConfig>,
) -> Result<ClientConfig, TransportError> {
    let crypto = QuicClientConfig::try_from(cfg).map_err(|e| tls_err("quic client crypto", e))?;
    let mut cfg = ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(transport);
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_depends_on_secret_and_pool_only() {
        let s = PoolSecret::from_bytes([7; 32]);
        let a = PoolTls::new(&s, "p").unwrap();
        let b = PoolTls::new(&s, "p").unwrap();
        assert_eq!(a.ca.der(), b.ca.der());
        let c = PoolTls::new(&s, "q").unwrap();
        assert_ne!(a.ca.der(), c.ca.der());
        let d = PoolTls::new(&PoolSecret::from_bytes([8; 32]), "p").unwrap();
        assert_ne!(a.ca.der(), d.ca.der());
        // Configurations build (TLS 1.3 only, mutual authentication).
        let me = a.identity(5).unwrap();
        a.rustls_server(&me).unwrap();
        a.rustls_client(&me).unwrap();
        assert_eq!(server_name(5), "ep-0000000000000005.ipl-quic");
    }
}
