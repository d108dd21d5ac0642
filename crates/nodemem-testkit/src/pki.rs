//! Certificates for one control plane: a cluster CA, the apiserver's serving
//! certificate, client certificates per identity, and the service-account signing key.
//! Everything is generated fresh per control plane (ECDSA P-256), nothing is reused.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::Error;

/// A certificate and its private key, both PEM.
#[derive(Clone, Debug)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The cluster CA; signs serving and client certificates.
pub struct Ca {
    pub pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn pki_err(e: rcgen::Error) -> Error {
    Error::Setup(format!("generating certificates: {e}"))
}

impl Ca {
    pub fn new(name: &str) -> Result<Self, Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(pki_err)?;
        let cert = params.self_signed(&key).map_err(pki_err)?;
        Ok(Ca {
            pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA's private key (the controller-manager signs CSRs with it).
    pub fn key_pem(&self) -> String {
        self.key_pem.clone()
    }

    /// A serving certificate for loopback (`127.0.0.1`, `localhost`) and the in-cluster
    /// service names.
    pub fn serving(&self, common_name: &str) -> Result<CertPair, Error> {
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
        ])
        .map_err(pki_err)?;
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().expect("an IP")));
        params
            .subject_alt_names
            .push(SanType::IpAddress("10.0.0.1".parse().expect("an IP")));
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate: the apiserver reads the user name from the CN and the
    /// groups from the O entries.
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<CertPair, Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<CertPair, Error> {
        let key = KeyPair::generate().map_err(pki_err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(pki_err)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The key pair the apiserver signs service-account tokens with (private, PKCS#8) and
/// verifies them with (public, SPKI).
pub fn service_account_keys() -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(pki_err)?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}
