//! A throwaway certificate authority for TLS tests: a CA, server and client
//! certificates signed by it, written as PEM files where the service can read them.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use sha2::{Digest, Sha256};

pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM, with the DER digest a tokens file names.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der_sha256: String,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `localhost` and `127.0.0.1`.
    pub fn server(&self) -> Leaf {
        self.leaf(&["localhost", "127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate naming `name`.
    pub fn client(&self, name: &str) -> Leaf {
        self.leaf(&[name], ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf certificate");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der_sha256: hex::encode(Sha256::digest(cert.der())),
        }
    }

    /// Writes `ca.pem`, `server.pem` and `server.key` under `dir` (replacing them by
    /// rename, as certificate tooling does); returns (ca, cert, key) paths.
    pub fn write_server_files(&self, dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let server = self.server();
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            let staged = dir.join(format!("{name}.new"));
            std::fs::write(&staged, text).unwrap();
            std::fs::rename(&staged, &path).unwrap();
            path
        };
        (
            write("ca.pem", &self.pem()),
            write("server.pem", &server.cert_pem),
            write("server.key", &server.key_pem),
        )
    }
}
