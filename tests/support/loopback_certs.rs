//! Certificates for etcd members on the loopback address: a CA made by the operator's own
//! code, and leaves naming `localhost` and `127.0.0.1` for peers, servers and clients alike
//! (etcd checks a peer's certificate against the address it connects from).

use std::net::{IpAddr, Ipv4Addr};

use etcd_operator::api::KeyType;
use etcd_operator::tls::{Ca, ClusterNames, Lifetime, new_ca};
use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyPair, SanType};

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Pair {
    /// The certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
}

/// A CA of cluster `name` in namespace `namespace`, valid for an hour from a minute ago.
pub fn a_ca(namespace: &str, name: &str) -> Ca {
    let now = jiff::Timestamp::now().as_second();
    let names = ClusterNames::new(namespace, name, "");
    new_ca(
        &names,
        KeyType::EcdsaP256,
        Lifetime::starting(now - 60, 3600),
    )
    .unwrap()
}

fn params() -> CertificateParams {
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params
}

/// A certificate for peers, servers and clients alike, issued by `ca`.
pub fn leaf(ca: &Ca) -> Pair {
    let issuer =
        Issuer::from_ca_cert_pem(&ca.cert_pem, KeyPair::from_pem(&ca.key_pem).unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params().signed_by(&key, &issuer).unwrap();
    Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// A certificate that signs itself: no CA vouches for it.
pub fn self_signed() -> Pair {
    let key = KeyPair::generate().unwrap();
    let cert = params().self_signed(&key).unwrap();
    Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}
