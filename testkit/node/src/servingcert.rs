//! The node's serving certificate for its kubelet API, obtained as a kubelet with
//! `serverTLSBootstrap` does: a new key and a CertificateSigningRequest for signer
//! `kubernetes.io/kubelet-serving` (subject `system:node:<name>` in `system:nodes`, the
//! node's address as IP SAN), which the node approves itself (its credentials allow it)
//! and the controller-manager's signer signs with the cluster CA.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::log::event;

/// The signer of kubelet serving certificates.
pub const SIGNER: &str = "kubernetes.io/kubelet-serving";

/// How long the node waits for its certificate.
const WAIT: Duration = Duration::from_secs(90);

/// A certificate and its key, PEM.
#[derive(Clone, Debug)]
pub struct ServingCert {
    /// The certificate chain.
    pub cert_pem: String,
    /// The private key.
    pub key_pem: String,
}

/// Why no certificate was had.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Making the key or the request failed.
    #[error("making the certificate request: {0}")]
    Request(#[from] rcgen::Error),
    /// The API refused or failed.
    #[error("{0}: {1}")]
    Api(&'static str, kube::Error),
    /// The signer refused or never answered.
    #[error("certificate request {0}: {1}")]
    NotIssued(String, String),
}

/// A new key and the PEM of a certificate request for node `node` at `address`.
pub fn request(node: &str, address: IpAddr) -> Result<(rcgen::KeyPair, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    let mut name = rcgen::DistinguishedName::new();
    name.push(rcgen::DnType::OrganizationName, "system:nodes");
    name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = name;
    params.subject_alt_names = vec![rcgen::SanType::IpAddress(address)];
    let csr = params.serialize_request(&key)?.pem()?;
    Ok((key, csr))
}

/// The CertificateSigningRequest object for `csr_pem`.
pub fn csr_object(name: &str, csr_pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: SIGNER.to_string(),
            usages: Some(
                ["digital signature", "key encipherment", "server auth"]
                    .map(String::from)
                    .to_vec(),
            ),
            ..Default::default()
        },
        status: None,
    }
}

/// Requests, approves and waits for the node's serving certificate.
pub async fn obtain(
    client: &Client,
    node: &str,
    address: IpAddr,
) -> Result<ServingCert, CertError> {
    let (key, csr_pem) = request(node, address)?;
    let name = format!("{node}-serving-{}", jiff::Timestamp::now().as_millisecond());
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    api.create(&PostParams::default(), &csr_object(&name, &csr_pem))
        .await
        .map_err(|e| CertError::Api("creating the certificate request", e))?;
    let approval = serde_json::json!({ "status": { "conditions": [{
        "type": "Approved",
        "status": "True",
        "reason": "ProcessNodeServingCertificate",
        "message": "the process node approves its own serving certificate",
    }]}});
    api.patch_approval(&name, &PatchParams::default(), &Patch::Merge(&approval))
        .await
        .map_err(|e| CertError::Api("approving the certificate request", e))?;
    let cert_pem = wait_issued(&api, &name).await?;
    event!("serving certificate issued for node {node} at {address} ({name})");
    Ok(ServingCert {
        cert_pem,
        key_pem: key.serialize_pem(),
    })
}

async fn wait_issued(
    api: &Api<CertificateSigningRequest>,
    name: &str,
) -> Result<String, CertError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let csr = api
            .get(name)
            .await
            .map_err(|e| CertError::Api("reading the certificate request", e))?;
        let status = csr.status.unwrap_or_default();
        if let Some(failed) = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Failed" && c.status == "True")
        {
            let why = failed.message.clone().unwrap_or_default();
            return Err(CertError::NotIssued(
                name.to_string(),
                format!("failed: {why}"),
            ));
        }
        if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
            return Ok(String::from_utf8_lossy(&cert.0).into_owned());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(CertError::NotIssued(
                name.to_string(),
                format!(
                    "not signed within {}s (is kube-controller-manager running with --cluster-signing-cert-file?)",
                    WAIT.as_secs()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::FromDer;

    #[test]
    fn request_names_the_node_in_system_nodes_with_its_address() {
        let (_key, pem) = request("n1", "127.0.0.1".parse().unwrap()).unwrap();
        use rustls::pki_types::pem::PemObject;
        let der = rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(pem.as_bytes())
            .expect("a PEM request");
        let (_, csr) =
            x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
                .expect("a PKCS#10 request");
        let subject = &csr.certification_request_info.subject;
        let cn: Vec<&str> = subject
            .iter_common_name()
            .filter_map(|a| a.as_str().ok())
            .collect();
        let org: Vec<&str> = subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok())
            .collect();
        assert_eq!(cn, ["system:node:n1"]);
        assert_eq!(org, ["system:nodes"]);
        let object = csr_object("n1-serving", &pem);
        assert_eq!(object.spec.signer_name, SIGNER);
        assert!(
            object
                .spec
                .usages
                .unwrap()
                .contains(&"server auth".to_string())
        );
    }
}
