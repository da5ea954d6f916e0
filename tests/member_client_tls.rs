//! The etcd adapter and the MemberClient over TLS against a real etcd process, with
//! certificates made by the operator's own code: the operator's client certificate is
//! presented, the member is verified by the DNS name it is reached by (`localhost`, which
//! operator-made server certificates cover; see `support::tls_etcd`), a client without a
//! certificate or with one from another CA is refused, and a renewed client certificate is
//! used from the next connection on.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use etcd_operator::api::KeyType;
use etcd_operator::etcd_api::{AddressSource, EtcdClientApi, IdentitySource, Route};
use etcd_operator::tls::{
    Ca, ClientIdentity, ClusterNames, Leaf, Lifetime, Role, issue_leaf, new_ca,
};
use etcd_operator_actors::member_client::{ListMembers, MemberClient, ProbeMember};
use etcd_operator_actors::ports::{EtcdApi, EtcdErrorKind};
use support::tls_etcd::TlsMember;

const CALL_TIMEOUT: Duration = Duration::from_secs(2);

fn names() -> ClusterNames {
    ClusterNames::new("default", "demo", "")
}

fn lifetime() -> Lifetime {
    let now = jiff::Timestamp::now().as_second();
    Lifetime::starting(now - 60, 3600)
}

fn ca() -> Ca {
    new_ca(&names(), KeyType::EcdsaP256, lifetime()).unwrap()
}

fn leaf(ca: &Ca, role: Role, names: &ClusterNames) -> Leaf {
    issue_leaf(ca, role, names, KeyType::EcdsaP256, lifetime()).unwrap()
}

/// The operator's identity: a client certificate from `client_ca`, trusting `server_ca`.
fn identity(client_ca: &Ca, server_ca: &Ca) -> ClientIdentity {
    let client = leaf(client_ca, Role::Client, &names());
    ClientIdentity {
        ca_pem: server_ca.cert_pem.clone().into_bytes(),
        cert_pem: client.cert_pem.into_bytes(),
        key_pem: client.key_pem.into_bytes(),
    }
}

fn api_with(identity: Option<ClientIdentity>) -> Arc<EtcdClientApi> {
    let source: IdentitySource = Arc::new(move || identity.clone());
    Arc::new(EtcdClientApi::new(CALL_TIMEOUT).with_identity(source))
}

/// A member with an operator-made server certificate, and a CA for both sides.
async fn tls_member() -> (Ca, TlsMember) {
    let ca = ca();
    let mut member = TlsMember::start("tls1", &leaf(&ca, Role::Server, &names()), &ca);
    let api = api_with(Some(identity(&ca, &ca)));
    let url = member.client_url.clone();
    member
        .wait_until(|| {
            let (api, url) = (api.clone(), url.clone());
            async move { api.status(&url).await.is_ok() }
        })
        .await;
    (ca, member)
}

#[actix_rt::test]
async fn the_member_client_lists_and_probes_over_tls_with_the_operators_certificate() {
    let (ca, member) = tls_member().await;
    let client = MemberClient::new(api_with(Some(identity(&ca, &ca)))).start();
    let endpoints = vec![member.client_url.clone()];

    let list = client
        .send(ListMembers { endpoints })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(list.members.len(), 1);
    assert_eq!(list.members[0].name, "tls1");
    assert_eq!(list.members[0].client_urls, vec![member.client_url.clone()]);

    let endpoint = member.client_url.clone();
    let health = client
        .send(ProbeMember { endpoint })
        .await
        .unwrap()
        .unwrap();
    assert!(health.is_healthy(), "{health:?}");
}

#[actix_rt::test]
async fn without_a_client_certificate_nothing_is_sent_and_etcd_refuses_one_anyway() {
    let (ca, member) = tls_member().await;
    // The adapter has no identity for a TLS endpoint: it does not connect at all.
    let err = api_with(None).status(&member.client_url).await.unwrap_err();
    assert!(err.message.contains("no client certificate"), "{err:?}");
    // A client that trusts the member but presents no certificate: etcd refuses it.
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(ca.cert_pem.as_bytes()));
    let options = etcd_client::ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(CALL_TIMEOUT)
        .with_timeout(CALL_TIMEOUT);
    let attempt = async {
        let mut c = etcd_client::Client::connect([&member.client_url], Some(options)).await?;
        c.status().await
    };
    let refused = tokio::time::timeout(CALL_TIMEOUT * 2, attempt).await;
    assert!(
        !matches!(refused, Ok(Ok(_))),
        "etcd answered a client without a certificate"
    );
}

#[actix_rt::test]
async fn a_client_certificate_from_another_ca_is_refused() {
    let (ca, member) = tls_member().await;
    let stranger = api_with(Some(identity(&self::ca(), &ca)));
    let err = stranger.status(&member.client_url).await.unwrap_err();
    assert!(
        matches!(
            err.kind,
            EtcdErrorKind::Unavailable | EtcdErrorKind::Timeout
        ),
        "{err:?}"
    );
}

#[actix_rt::test]
async fn a_member_whose_certificate_does_not_cover_its_name_is_not_trusted() {
    let ca = ca();
    // A certificate for another cluster's peers: no `localhost` among its names.
    let other = ClusterNames::new("default", "other", "");
    let wrong = leaf(&ca, Role::Peer, &other);
    let member = TlsMember::start("tls2", &wrong, &ca);
    let api = api_with(Some(identity(&ca, &ca)));
    // Give etcd time to listen; every call must still fail verification.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let err = api.status(&member.client_url).await.unwrap_err();
    assert_eq!(err.kind, EtcdErrorKind::Unavailable, "{err:?}");
    assert!(
        err.message.to_lowercase().contains("certificate")
            || err.message.to_lowercase().contains("name"),
        "{err:?}: {}",
        member.log()
    );
}

#[actix_rt::test]
async fn a_renewed_client_certificate_is_used_from_the_next_connection() {
    let (ca, member) = tls_member().await;
    // The identity starts out from another CA (refused), then is renewed from the right one.
    let current = Arc::new(Mutex::new(identity(&self::ca(), &ca)));
    let source: IdentitySource = {
        let current = current.clone();
        Arc::new(move || Some(current.lock().unwrap().clone()))
    };
    let api = EtcdClientApi::new(CALL_TIMEOUT).with_identity(source);
    assert!(api.status(&member.client_url).await.is_err());
    *current.lock().unwrap() = identity(&ca, &ca);
    let health = api.status(&member.client_url).await.unwrap();
    assert!(health.is_healthy(), "{health:?}");
}

/// The member's URL by its DNS name in cluster `demo` (never resolved: the address source
/// answers for it, as the pod cache does in the operator), and an API dialing it at the
/// member's loopback address.
fn dialed_by_address(member: &TlsMember, ca: &Ca) -> (String, Arc<EtcdClientApi>) {
    let port = member.client_url.rsplit_once(':').unwrap().1.to_string();
    let host = "tls1.demo.default.svc";
    let addresses: AddressSource = Arc::new(move |asked| {
        assert_eq!(asked, host, "only the member's name is looked up");
        Route::Address(std::net::IpAddr::from([127, 0, 0, 1]))
    });
    let identity = Some(identity(ca, ca));
    let source: IdentitySource = Arc::new(move || identity.clone());
    let api = EtcdClientApi::new(CALL_TIMEOUT)
        .with_identity(source)
        .with_addresses(addresses);
    (format!("https://{host}:{port}"), Arc::new(api))
}

#[actix_rt::test]
async fn a_member_dialed_at_its_pods_address_is_verified_by_its_dns_name() {
    let (ca, member) = tls_member().await;
    let (url, api) = dialed_by_address(&member, &ca);
    let health = api.status(&url).await.expect("status over TLS by address");
    assert!(health.is_healthy(), "{health:?}");
    let list = api.list(std::slice::from_ref(&url)).await.unwrap();
    assert_eq!(list.members[0].name, "tls1");
}

#[actix_rt::test]
async fn a_member_dialed_by_address_whose_certificate_is_another_clusters_is_not_trusted() {
    let ca = ca();
    let other = ClusterNames::new("default", "other", "");
    let member = TlsMember::start("tls1", &leaf(&ca, Role::Server, &other), &ca);
    // `localhost` is among its names, so it does answer a client that verifies that name.
    let by_localhost = api_with(Some(identity(&ca, &ca)));
    let mut member = member;
    let url = member.client_url.clone();
    member
        .wait_until(|| {
            let (api, url) = (by_localhost.clone(), url.clone());
            async move { api.status(&url).await.is_ok() }
        })
        .await;
    let (url, api) = dialed_by_address(&member, &ca);
    let err = api.status(&url).await.unwrap_err();
    assert_eq!(err.kind, EtcdErrorKind::Unavailable, "{err:?}");
}
