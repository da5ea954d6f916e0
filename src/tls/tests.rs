//! Names, issuance and every way a TLS Secret can be refused.

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};

use super::layout::{CA_CERT_KEY, CA_KEY_KEY};
use super::*;
use crate::api::KeyType;
use crate::secret_data::SecretData;

const NOW: i64 = 1_800_000_000;
const DAY: i64 = 86_400;

fn names() -> ClusterNames {
    ClusterNames::new("prod", "demo", "")
}

fn year() -> Lifetime {
    Lifetime::starting(NOW - DAY, 365 * DAY)
}

fn ca() -> Ca {
    new_ca(
        &names(),
        KeyType::EcdsaP256,
        Lifetime::starting(NOW - DAY, 3650 * DAY),
    )
    .unwrap()
}

/// A Secret of `role` holding `leaf` and `ca` under CoreOS's keys.
fn secret(role: Role, leaf: &Leaf, ca: &Ca) -> SecretData {
    [
        (role.cert_key(), leaf.cert_pem.as_bytes()),
        (role.key_key(), leaf.key_pem.as_bytes()),
        (role.ca_key(), ca.cert_pem.as_bytes()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_vec()))
    .collect()
}

fn issued(role: Role, ca: &Ca) -> SecretData {
    let leaf = issue_leaf(ca, role, &names(), KeyType::EcdsaP256, year()).unwrap();
    secret(role, &leaf, ca)
}

fn check(role: Role, data: &SecretData) -> Result<CheckedBundle, Vec<SecretProblem>> {
    let bundle = Bundle {
        role,
        secret: role.label(),
        data: Some(data),
    };
    check_bundle(bundle, &names(), NOW)
}

/// The one problem `data` has as `role`'s Secret.
fn only_problem(role: Role, data: &SecretData) -> SecretProblem {
    let problems = check(role, data).expect_err("the Secret is refused");
    assert_eq!(problems.len(), 1, "{problems:?}");
    problems.into_iter().next().unwrap()
}

/// A certificate made as CoreOS's TLS guide makes them (cfssl): only DNS names, the
/// wildcard forms, no IP address, signed by `ca`.
fn coreos_style(role: Role, ca: &Ca, dns: &[&str], usages: Vec<ExtendedKeyUsagePurpose>) -> Leaf {
    let mut params =
        CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, role.label());
    params.extended_key_usages = usages;
    params.not_before = time::OffsetDateTime::from_unix_timestamp(NOW - DAY).unwrap();
    params.not_after = time::OffsetDateTime::from_unix_timestamp(NOW + 30 * DAY).unwrap();
    let key = KeyPair::generate().unwrap();
    let issuer =
        Issuer::from_ca_cert_pem(&ca.cert_pem, KeyPair::from_pem(&ca.key_pem).unwrap()).unwrap();
    Leaf {
        cert_pem: params.signed_by(&key, &issuer).unwrap().pem(),
        key_pem: key.serialize_pem(),
    }
}

#[test]
fn a_wildcard_covers_exactly_one_leftmost_label() {
    assert!(covers("*.demo.prod.svc", "demo-x7k2p.demo.prod.svc"));
    assert!(covers("*.DEMO.prod.svc", "demo-x7k2p.demo.PROD.svc"));
    assert!(!covers("*.demo.prod.svc", "a.b.demo.prod.svc"));
    assert!(!covers("*.demo.prod.svc", "demo.prod.svc"));
    assert!(!covers("*.demo.prod.svc", ".demo.prod.svc"));
    assert!(covers("localhost", "localhost"));
    assert!(!covers("demo-a.demo.prod.svc", "demo-b.demo.prod.svc"));
}

#[test]
fn peer_and_server_names_are_coreos_s_and_the_client_service_s() {
    let n = names();
    assert_eq!(
        n.peer_sans(),
        vec!["*.demo.prod.svc", "*.demo.prod.svc.cluster.local"]
    );
    assert_eq!(
        n.server_sans(),
        vec![
            "*.demo.prod.svc",
            "*.demo.prod.svc.cluster.local",
            "demo-client.prod.svc",
            "demo-client.prod.svc.cluster.local",
            "demo-client.prod",
            "demo-client",
            "localhost",
        ]
    );
    assert_eq!(
        ClusterNames::new("prod", "demo", ".example.org.").domain,
        "example.org"
    );
}

#[test]
fn issued_certificates_pass_every_check_and_verify_against_their_ca() {
    let own = ca();
    let [peer, server, client] = Role::ALL.map(|role| check(role, &issued(role, &own)).unwrap());
    assert!(check_trust(&peer, &server, &client).is_empty());
    assert_eq!(peer.not_after, NOW - DAY + 365 * DAY);
    // Another CA's certificate does not verify against this one.
    let other = super::pem::certificates(ca().cert_pem.as_bytes()).unwrap();
    assert!(!super::pem::signed_by(&peer.cert, &other[0]));
}

#[test]
fn every_key_type_can_be_issued_and_checked() {
    for key in [KeyType::EcdsaP256, KeyType::EcdsaP384, KeyType::Ed25519] {
        let ca = new_ca(&names(), key, year()).unwrap();
        let leaf = issue_leaf(&ca, Role::Server, &names(), key, year()).unwrap();
        check(Role::Server, &secret(Role::Server, &leaf, &ca)).unwrap();
        let ca_data: SecretData = [
            (CA_CERT_KEY.to_string(), ca.cert_pem.into_bytes()),
            (CA_KEY_KEY.to_string(), ca.key_pem.into_bytes()),
        ]
        .into();
        check_ca("demo-ca", Some(&ca_data), NOW).unwrap();
    }
}

#[test]
fn coreos_style_certificates_with_only_wildcard_names_are_accepted() {
    let ca = ca();
    let both = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let peer = coreos_style(
        Role::Peer,
        &ca,
        &["*.demo.prod.svc", "*.demo.prod.svc.cluster.local"],
        both.clone(),
    );
    let server = coreos_style(
        Role::Server,
        &ca,
        &["*.demo.prod.svc", "demo-client.prod.svc", "localhost"],
        both,
    );
    let client = coreos_style(
        Role::Client,
        &ca,
        &[],
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    );
    let peer = check(Role::Peer, &secret(Role::Peer, &peer, &ca)).unwrap();
    let server = check(Role::Server, &secret(Role::Server, &server, &ca)).unwrap();
    let client = check(Role::Client, &secret(Role::Client, &client, &ca)).unwrap();
    assert!(check_trust(&peer, &server, &client).is_empty());
}

#[test]
fn a_missing_secret_is_reported_by_name() {
    let bundle = Bundle {
        role: Role::Peer,
        secret: "demo-peer",
        data: None,
    };
    let problems = check_bundle(bundle, &names(), NOW).unwrap_err();
    assert_eq!(problems[0].to_string(), "Secret demo-peer: not found");
}

#[test]
fn every_missing_key_is_reported() {
    let mut data = issued(Role::Server, &ca());
    data.remove("server.key");
    data.remove("server-ca.crt");
    let problems = check(Role::Server, &data).unwrap_err();
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        vec![
            "Secret server key server.key: missing",
            "Secret server key server-ca.crt: missing"
        ]
    );
}

#[test]
fn values_that_are_no_certificate_or_key_are_refused() {
    let mut data = issued(Role::Client, &ca());
    data.insert("etcd-client.crt".into(), b"hello".to_vec());
    data.insert(
        "etcd-client.key".into(),
        b"-----BEGIN CERTIFICATE-----".to_vec(),
    );
    let problems = check(Role::Client, &data).unwrap_err();
    assert!(
        matches!(problems[0].problem, Problem::NotACertificate(_)),
        "{problems:?}"
    );
    assert_eq!(problems[0].key.as_deref(), Some("etcd-client.crt"));
    assert!(
        matches!(problems[1].problem, Problem::NotAKey(_)),
        "{problems:?}"
    );
}

#[test]
fn an_expired_or_not_yet_valid_certificate_is_refused() {
    let ca = ca();
    let expired = Lifetime::starting(NOW - 10 * DAY, DAY);
    let leaf = issue_leaf(&ca, Role::Peer, &names(), KeyType::EcdsaP256, expired).unwrap();
    let problem = only_problem(Role::Peer, &secret(Role::Peer, &leaf, &ca));
    assert!(matches!(problem.problem, Problem::Expired(_)), "{problem}");
    assert!(
        problem
            .to_string()
            .starts_with("Secret peer key peer.crt: expired at 2027-"),
        "{problem}"
    );
    let future = Lifetime::starting(NOW + DAY, DAY);
    let leaf = issue_leaf(&ca, Role::Peer, &names(), KeyType::EcdsaP256, future).unwrap();
    let problem = only_problem(Role::Peer, &secret(Role::Peer, &leaf, &ca));
    assert!(
        matches!(problem.problem, Problem::NotYetValid(_)),
        "{problem}"
    );
}

#[test]
fn an_expired_ca_is_refused_on_its_key() {
    let old = new_ca(
        &names(),
        KeyType::EcdsaP256,
        Lifetime::starting(NOW - 10 * DAY, DAY),
    )
    .unwrap();
    let leaf = issue_leaf(&old, Role::Server, &names(), KeyType::EcdsaP256, year()).unwrap();
    let problem = only_problem(Role::Server, &secret(Role::Server, &leaf, &old));
    assert_eq!(problem.key.as_deref(), Some("server-ca.crt"));
    assert!(matches!(problem.problem, Problem::Expired(_)), "{problem}");
}

#[test]
fn a_peer_certificate_not_covering_every_member_is_refused() {
    let ca = ca();
    let both = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    // Named members only: a new member would not be covered.
    let named = coreos_style(
        Role::Peer,
        &ca,
        &["demo-aaaaa.demo.prod.svc", "*.demo.prod.svc.cluster.local"],
        both.clone(),
    );
    let problem = only_problem(Role::Peer, &secret(Role::Peer, &named, &ca));
    assert_eq!(
        problem.problem,
        Problem::NameNotCovered {
            name: "demo-bcdfg.demo.prod.svc".into(),
            why: "members are reached by <member>.<cluster>.<namespace>.svc: use a wildcard",
        }
    );
    // Without the fully qualified form, peers' reverse lookups fail etcd's check.
    let short = coreos_style(Role::Peer, &ca, &["*.demo.prod.svc"], both.clone());
    let problem = only_problem(Role::Peer, &secret(Role::Peer, &short, &ca));
    assert!(
        problem
            .to_string()
            .contains("demo-bcdfg.demo.prod.svc.cluster.local"),
        "{problem}"
    );
    // Another cluster's certificate.
    let other = coreos_style(
        Role::Peer,
        &ca,
        &["*.other.prod.svc", "*.other.prod.svc.cluster.local"],
        both,
    );
    assert_eq!(
        check(Role::Peer, &secret(Role::Peer, &other, &ca))
            .unwrap_err()
            .len(),
        2
    );
}

#[test]
fn a_server_certificate_without_localhost_is_refused() {
    let ca = ca();
    let leaf = coreos_style(
        Role::Server,
        &ca,
        &["*.demo.prod.svc"],
        vec![ExtendedKeyUsagePurpose::ServerAuth],
    );
    let problem = only_problem(Role::Server, &secret(Role::Server, &leaf, &ca));
    assert!(
        problem.to_string().contains("does not cover localhost"),
        "{problem}"
    );
}

#[test]
fn a_key_of_another_certificate_is_refused() {
    let ca = ca();
    let mut data = issued(Role::Peer, &ca);
    let other = issue_leaf(&ca, Role::Peer, &names(), KeyType::EcdsaP256, year()).unwrap();
    data.insert("peer.key".into(), other.key_pem.into_bytes());
    let problem = only_problem(Role::Peer, &data);
    assert_eq!(problem.problem, Problem::KeyMismatch("peer.crt".into()));
}

#[test]
fn a_certificate_for_the_wrong_use_is_refused() {
    let ca = ca();
    // A server-only certificate in the peer Secret cannot dial other members.
    let leaf = coreos_style(
        Role::Peer,
        &ca,
        &["*.demo.prod.svc", "*.demo.prod.svc.cluster.local"],
        vec![ExtendedKeyUsagePurpose::ServerAuth],
    );
    let problem = only_problem(Role::Peer, &secret(Role::Peer, &leaf, &ca));
    assert_eq!(
        problem.problem,
        Problem::WrongUsage("TLS client authentication")
    );
}

#[test]
fn certificates_not_signed_by_the_ca_the_other_side_trusts_are_refused() {
    let (ours, theirs) = (ca(), ca());
    let peer = check(Role::Peer, &issued(Role::Peer, &ours)).unwrap();
    let server = check(Role::Server, &issued(Role::Server, &ours)).unwrap();
    // The operator's Secret: its own certificate from another CA, which it also trusts.
    let client = check(Role::Client, &issued(Role::Client, &theirs)).unwrap();
    let problems: Vec<String> = check_trust(&peer, &server, &client)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        problems,
        vec![
            "Secret server key server.crt: is not signed by a CA in Secret client key etcd-client-ca.crt",
            "Secret client key etcd-client.crt: is not signed by a CA in Secret server key server-ca.crt",
        ]
    );
}

#[test]
fn a_ca_secret_must_hold_a_ca_and_its_key() {
    let ca = ca();
    let leaf = issue_leaf(&ca, Role::Client, &names(), KeyType::EcdsaP256, year()).unwrap();
    let not_a_ca: SecretData = [
        (CA_CERT_KEY.to_string(), leaf.cert_pem.into_bytes()),
        (CA_KEY_KEY.to_string(), leaf.key_pem.into_bytes()),
    ]
    .into();
    let problems = check_ca("my-ca", Some(&not_a_ca), NOW).unwrap_err();
    assert_eq!(
        problems[0].to_string(),
        "Secret my-ca key tls.crt: is not a CA certificate (basic constraints)"
    );
    let problems = check_ca("my-ca", None, NOW).unwrap_err();
    assert_eq!(problems[0].problem, Problem::SecretMissing);
    let no_key: SecretData = [(CA_CERT_KEY.to_string(), ca.cert_pem.into_bytes())].into();
    let problems = check_ca("my-ca", Some(&no_key), NOW).unwrap_err();
    assert_eq!(problems[0].to_string(), "Secret my-ca key tls.key: missing");
}

#[test]
fn client_identities_differ_by_fingerprint_and_never_print_their_key() {
    let a = ClientIdentity {
        ca_pem: b"ca".to_vec(),
        cert_pem: b"cert".to_vec(),
        key_pem: b"secret key".to_vec(),
    };
    let mut b = a.clone();
    b.cert_pem = b"cert2".to_vec();
    assert_ne!(a.fingerprint(), b.fingerprint());
    assert!(!format!("{a:?}").contains("secret"));
}

fn ca_secret(ca: &Ca) -> SecretData {
    [
        (CA_CERT_KEY.to_string(), ca.cert_pem.clone().into_bytes()),
        (CA_KEY_KEY.to_string(), ca.key_pem.clone().into_bytes()),
    ]
    .into()
}

fn found<'a>(name: &'a str, data: Option<&'a SecretData>) -> ReadSecret<'a> {
    ReadSecret {
        name,
        data,
        ours: true,
    }
}

#[test]
fn renewal_comes_at_two_thirds_of_the_lifetime_unless_set() {
    assert_eq!(Renewal::default().at(0, 120), 80);
    assert_eq!(Renewal { percent: Some(50) }.at(100, 300), 200);
}

#[test]
fn the_operator_makes_its_ca_only_before_the_first_member() {
    let none = std::collections::BTreeMap::new();
    let operator = CaSource::Operator;
    assert_eq!(
        ca_state(found("demo-ca", None), &none, &operator, false, NOW),
        CaState::ToMake
    );
    let CaState::Invalid(problems) = ca_state(found("demo-ca", None), &none, &operator, true, NOW)
    else {
        panic!("a missing CA of a cluster with members must be a problem");
    };
    assert_eq!(problems[0].to_string(), "Secret demo-ca: not found");
}

#[test]
fn a_users_ca_is_copied_whenever_the_copy_is_missing_and_never_made() {
    let none = std::collections::BTreeMap::new();
    let theirs = ca_secret(&ca());
    let user = CaSource::User(check_ca("my-ca", Some(&theirs), NOW));
    for born in [false, true] {
        let CaState::Adopt { record, ca } =
            ca_state(found("demo-ca-in-use", None), &none, &user, born, NOW)
        else {
            panic!("the missing copy of a user's CA is made from it (born: {born})");
        };
        assert_eq!(record, "demo-ca-in-use");
        assert_eq!(ca.secret, "my-ca");
        assert_eq!(ca.cert_pem, theirs[CA_CERT_KEY]);
    }
    // The copy, once made, is what issues.
    let copy = ca_secret(&ca());
    assert!(matches!(
        ca_state(
            found("demo-ca-in-use", Some(&copy)),
            &none,
            &user,
            true,
            NOW
        ),
        CaState::Valid(_)
    ));
    // A user's Secret that is missing is a problem naming it, copy or not: nothing is made.
    let missing = CaSource::User(check_ca("my-ca", None, NOW));
    for copy in [None, Some(&copy)] {
        let CaState::Invalid(problems) =
            ca_state(found("demo-ca-in-use", copy), &none, &missing, true, NOW)
        else {
            panic!("a missing user's CA must be a problem");
        };
        assert_eq!(problems[0].to_string(), "Secret my-ca: not found");
    }
    // The copy's name taken by someone else's Secret: never overwritten.
    let foreign = ReadSecret {
        ours: false,
        ..found("demo-ca-in-use", Some(&copy))
    };
    assert!(matches!(
        ca_state(foreign, &none, &user, true, NOW),
        CaState::Invalid(_)
    ));
}

#[test]
fn a_cluster_made_before_the_copy_keeps_its_certificates_when_the_copy_is_made() {
    let theirs = ca();
    let data = ca_secret(&theirs);
    let checked = check_ca("my-ca", Some(&data), NOW).unwrap();
    let life = Lifetime::starting(NOW - 10, 300);
    let datas = Role::ALL.map(|role| {
        let leaf = issue_leaf(&theirs, role, &names(), KeyType::EcdsaP256, life).unwrap();
        secret(role, &leaf, &theirs)
    });
    let leaves = [0, 1, 2].map(|i| (Role::ALL[i], found(Role::ALL[i].label(), Some(&datas[i]))));
    let state = CaState::Adopt {
        record: "demo-ca-in-use".into(),
        ca: Box::new(checked),
    };
    let verdict = auto_verdict(state, &leaves, &names(), Renewal::default(), NOW);
    let obs = &verdict.observation;
    assert_eq!(
        obs.to_issue.len(),
        1,
        "only the copy is made: {:?}",
        obs.to_issue
    );
    assert!(
        obs.to_issue[0].contains("demo-ca-in-use"),
        "{:?}",
        obs.to_issue
    );
    assert!(!obs.missing);
    assert!(verdict.identity.is_some());
}

#[test]
fn a_new_auto_cluster_issues_everything_before_any_member() {
    let leaves = Role::ALL.map(|role| (role, found(role.label(), None)));
    let verdict = auto_verdict(CaState::ToMake, &leaves, &names(), Renewal::default(), NOW);
    assert!(verdict.observation.missing);
    assert_eq!(verdict.observation.to_issue.len(), 4);
    assert!(verdict.identity.is_none());
}

#[test]
fn auto_certificates_are_in_use_until_due_then_renewed() {
    let ca = ca();
    let ca_data = ca_secret(&ca);
    let checked = CaRecord::plain(check_ca("demo-ca", Some(&ca_data), NOW).unwrap());
    let life = Lifetime::starting(NOW - 10, 300);
    let datas = Role::ALL.map(|role| {
        secret(
            role,
            &issue_leaf(&ca, role, &names(), KeyType::EcdsaP256, life).unwrap(),
            &ca,
        )
    });
    fn leaves(datas: &[SecretData; 3]) -> [(Role, ReadSecret<'_>); 3] {
        [0, 1, 2].map(|i| (Role::ALL[i], found(Role::ALL[i].label(), Some(&datas[i]))))
    }
    let state = CaState::Valid(Box::new(checked.clone()));
    let fresh = auto_verdict(
        state.clone(),
        &leaves(&datas),
        &names(),
        Renewal::default(),
        NOW,
    );
    assert!(
        fresh.observation.to_issue.is_empty(),
        "{:?}",
        fresh.observation
    );
    assert!(fresh.observation.problems.is_empty());
    assert_eq!(fresh.observation.certificates.len(), 4);
    assert!(fresh.identity.is_some());
    // Two thirds of 300 s after NOW - 10: due at NOW + 190.
    let later = auto_verdict(
        state,
        &leaves(&datas),
        &names(),
        Renewal::default(),
        NOW + 200,
    );
    assert_eq!(
        later.observation.to_issue.len(),
        3,
        "{:?}",
        later.observation
    );
    assert!(!later.observation.missing);
    // A Secret of someone else under the operator's name is never overwritten.
    let foreign = ReadSecret {
        ours: false,
        ..found("peer", Some(&datas[0]))
    };
    let state = leaf_state(
        Role::Peer,
        foreign,
        &checked,
        &names(),
        Renewal::default(),
        NOW,
    );
    assert!(matches!(state, LeafState::Foreign(_)), "{state:?}");
}

#[test]
fn static_secrets_without_a_name_in_the_spec_are_reported_by_field() {
    let policy = crate::api::TlsPolicy {
        r#static: Some(crate::api::StaticTls::default()),
        auto: None,
    };
    let names_in_spec = secret_names("demo", Some(&policy)).unwrap();
    let none = [found("", None), found("", None), found("", None)];
    let verdict = static_verdict(&names_in_spec, &none, &names(), NOW);
    assert_eq!(verdict.observation.problems.len(), 3);
    assert!(
        verdict.observation.problems[0].contains("spec.TLS.static.member.peerSecret is not set"),
        "{:?}",
        verdict.observation.problems
    );
}

mod rotation {
    //! CA rotation as the CA Secret records it.

    use std::collections::BTreeMap;

    use etcd_operator_core::lifecycle::CaRotationStep::{
        self, DropOldCa, ReissueLeaves, TrustNewCa,
    };

    use super::*;
    use crate::tls::pem::certificates;
    use crate::tls::rotation::*;

    type Annotations = BTreeMap<String, String>;

    /// A `new_ca` for steps after the first, which make no CA.
    fn no_new_ca() -> Result<Ca, crate::tls::NewCaError> {
        panic!("only step one makes a new CA")
    }

    fn other_ca() -> Ca {
        new_ca(
            &names(),
            KeyType::EcdsaP256,
            Lifetime::starting(NOW - 60, 3650 * DAY),
        )
        .unwrap()
    }

    /// The Secret after `write`, over `annotations`.
    fn applied(write: &CaWrite, mut annotations: Annotations) -> (SecretData, Annotations) {
        for (k, v) in &write.annotations {
            match v {
                Some(v) => annotations.insert(k.clone(), v.clone()),
                None => annotations.remove(k),
            };
        }
        (write.data.clone(), annotations)
    }

    fn record(data: &SecretData, annotations: &Annotations, now: i64) -> CaRecord {
        ca_record("demo-ca", data, annotations, now).unwrap()
    }

    fn step(
        rec: &CaRecord,
        annotations: Annotations,
        from: Option<CaRotationStep>,
        now: i64,
    ) -> (CaRecord, Annotations) {
        let to = CaRotationStep::after(from);
        let write = advance(rec, (from, to), || Ok(other_ca()), Some("1"), now).unwrap();
        let (data, annotations) = applied(&write, annotations);
        (record(&data, &annotations, now), annotations)
    }

    fn digest(bundle: &[u8]) -> Option<String> {
        trust_digest(bundle, bundle)
    }

    #[test]
    fn a_rotation_goes_through_its_three_steps_and_the_trust_bundle_follows() {
        let old = ca();
        let start = record(&ca_secret(&old), &Annotations::new(), NOW);
        assert_eq!(start.trust_bundle(), old.cert_pem.as_bytes());
        let before = digest(&start.trust_bundle());

        let (trusting, ann) = step(&start, Annotations::new(), None, NOW);
        assert_eq!(trusting.step, Some(TrustNewCa));
        assert_eq!(trusting.handled.as_deref(), Some("1"));
        assert_eq!(
            trusting.signer.cert_pem,
            old.cert_pem.as_bytes(),
            "the old CA still issues"
        );
        let both = digest(&trusting.trust_bundle());
        assert_ne!(both, before, "a new bundle: members restart onto it");
        assert_eq!(certificates(&trusting.trust_bundle()).unwrap().len(), 2);

        let (reissuing, ann) = step(&trusting, ann, Some(TrustNewCa), NOW + 100);
        assert_eq!(reissuing.step, Some(ReissueLeaves));
        assert_ne!(
            reissuing.signer.cert_pem,
            old.cert_pem.as_bytes(),
            "the new CA issues"
        );
        assert_eq!(reissuing.previous.as_deref(), Some(old.cert_pem.as_bytes()));
        assert_eq!(
            digest(&reissuing.trust_bundle()),
            both,
            "the same CAs are trusted: no restart for re-issuing"
        );

        let (dropping, ann) = step(&reissuing, ann, Some(ReissueLeaves), NOW + 200);
        assert_eq!(dropping.step, Some(DropOldCa));
        assert_eq!(dropping.trust_bundle(), reissuing.signer.cert_pem);
        assert_ne!(digest(&dropping.trust_bundle()), both);

        let (done, ann) = step(&dropping, ann, Some(DropOldCa), NOW + 300);
        assert_eq!(done.step, None);
        assert_eq!(done.signer, dropping.signer);
        assert!(!ann.contains_key(STEP_ANNOTATION));
        assert_eq!(ann.get(HANDLED_ANNOTATION).map(String::as_str), Some("1"));
    }

    #[test]
    fn a_step_is_refused_on_a_secret_at_another_step_or_when_it_would_skip_one() {
        let start = record(&ca_secret(&ca()), &Annotations::new(), NOW);
        let new = || Ok(other_ca());
        let not_at = advance(
            &start,
            (Some(TrustNewCa), Some(ReissueLeaves)),
            new,
            None,
            NOW,
        );
        assert!(
            matches!(not_at, Err(AdvanceError::NotAt { .. })),
            "{not_at:?}"
        );
        let skips = advance(&start, (None, Some(ReissueLeaves)), new, None, NOW);
        assert!(
            matches!(skips, Err(AdvanceError::Skips { .. })),
            "{skips:?}"
        );
        let (trusting, _) = step(&start, Annotations::new(), None, NOW);
        let skips = advance(
            &trusting,
            (Some(TrustNewCa), Some(DropOldCa)),
            new,
            None,
            NOW,
        );
        assert!(
            matches!(skips, Err(AdvanceError::Skips { .. })),
            "{skips:?}"
        );
    }

    #[test]
    fn a_rotation_is_due_on_a_new_annotation_value_or_at_the_ca_renewal_point() {
        let start = record(&ca_secret(&ca()), &Annotations::new(), NOW);
        let operator = CaSource::Operator;
        let view = |rec: &CaRecord, source, asked, now| {
            rotation_view(rec, source, asked, Renewal::default(), now)
        };
        assert_eq!(view(&start, &operator, None, NOW).due, None);
        assert!(
            view(&start, &operator, Some("a"), NOW)
                .due
                .unwrap()
                .contains("\"a\"")
        );
        let handled = CaRecord {
            handled: Some("a".into()),
            ..start.clone()
        };
        assert_eq!(view(&handled, &operator, Some("a"), NOW).due, None);
        // A user's CA is never rotated by the operator: not when asked, not at its
        // renewal point.
        let user = CaSource::User(Ok(start.signer.clone()));
        assert_eq!(view(&start, &user, Some("a"), NOW).due, None);
        let renew = Renewal::default().at(start.signer.not_before, start.signer.not_after);
        assert_eq!(view(&start, &user, None, renew).due, None);
        // Ten years from NOW - DAY: renewed at two thirds.
        assert_eq!(view(&start, &operator, None, renew - 1).due, None);
        assert!(
            view(&start, &operator, None, renew)
                .due
                .unwrap()
                .contains("renewal point")
        );
        // During a rotation nothing new is due; the re-issued leaves propagate with time.
        let (trusting, ann) = step(&start, Annotations::new(), None, NOW);
        assert_eq!(view(&trusting, &operator, Some("b"), NOW).due, None);
        let (reissuing, _) = step(&trusting, ann, Some(TrustNewCa), NOW);
        assert!(!view(&reissuing, &operator, None, NOW + PROPAGATION_S - 1).propagated);
        assert!(view(&reissuing, &operator, None, NOW + PROPAGATION_S).propagated);
    }

    #[test]
    fn a_new_ca_in_the_users_secret_is_adopted_through_the_three_steps_then_nothing_is_due() {
        let (old, new) = (ca(), other_ca());
        let start =
            ca_record("demo-ca-in-use", &ca_secret(&old), &Annotations::new(), NOW).unwrap();
        let view = |rec: &CaRecord, theirs: &Ca| {
            let user = CaSource::User(check_ca("my-ca", Some(&ca_secret(theirs)), NOW));
            rotation_view(rec, &user, None, Renewal::default(), NOW)
        };
        assert_eq!(view(&start, &old).due, None, "the CA in use is the user's");
        let due = view(&start, &new)
            .due
            .expect("a new CA in the user's Secret");
        assert!(
            due.contains("my-ca") && due.contains("demo-ca-in-use"),
            "{due}"
        );

        let adopt = || Ok(new.clone());
        let write = advance(&start, (None, Some(TrustNewCa)), adopt, None, NOW).unwrap();
        let (data, ann) = applied(&write, Annotations::new());
        let trusting = ca_record("demo-ca-in-use", &data, &ann, NOW).unwrap();
        assert_eq!(
            trusting.signer.cert_pem,
            old.cert_pem.as_bytes(),
            "the old CA still issues"
        );
        let next = trusting
            .next
            .as_ref()
            .expect("the user's CA is trusted next");
        assert_eq!(next.cert_pem, new.cert_pem.as_bytes());
        assert_eq!(next.key_pem, new.key_pem.as_bytes());
        assert_eq!(
            view(&trusting, &new).due,
            None,
            "nothing new during a rotation"
        );
        let mut rec = trusting;
        let mut ann = ann;
        for from in [Some(TrustNewCa), Some(ReissueLeaves), Some(DropOldCa)] {
            let to = CaRotationStep::after(from);
            let write = advance(&rec, (from, to), no_new_ca, None, NOW).unwrap();
            let (data, applied_ann) = applied(&write, ann);
            ann = applied_ann;
            rec = ca_record("demo-ca-in-use", &data, &ann, NOW).unwrap();
        }
        assert_eq!(rec.step, None);
        assert_eq!(
            rec.signer.cert_pem,
            new.cert_pem.as_bytes(),
            "the user's CA issues"
        );
        assert_eq!(rec.trust_bundle(), new.cert_pem.as_bytes());
        assert_eq!(view(&rec, &new).due, None, "adopted: nothing more is due");
    }

    #[test]
    fn leaves_are_reissued_when_their_bundle_or_issuer_is_not_the_steps() {
        let old = ca();
        let start = record(&ca_secret(&old), &Annotations::new(), NOW);
        let (trusting, ann) = step(&start, Annotations::new(), None, NOW);
        let state = |rec: &CaRecord, data: &SecretData| {
            leaf_state(
                Role::Peer,
                found("peer", Some(data)),
                rec,
                &names(),
                Renewal::default(),
                NOW,
            )
        };
        let plain = issued(Role::Peer, &old);
        assert!(matches!(state(&start, &plain), LeafState::Valid(..)));
        let LeafState::Rewrite(_, why) = state(&trusting, &plain) else {
            panic!("a leaf without the new CA in its bundle is rewritten");
        };
        assert!(why.contains("CA bundle"), "{why}");
        let mut with_bundle = plain.clone();
        with_bundle.insert("peer-ca.crt".into(), trusting.trust_bundle());
        assert!(matches!(
            state(&trusting, &with_bundle),
            LeafState::Valid(..)
        ));
        // Once the new CA issues, a leaf of the old one is re-issued.
        let (reissuing, _) = step(&trusting, ann, Some(TrustNewCa), NOW);
        with_bundle.insert("peer-ca.crt".into(), reissuing.trust_bundle());
        let LeafState::Rewrite(_, why) = state(&reissuing, &with_bundle) else {
            panic!("a leaf of the old CA is re-issued");
        };
        assert!(why.contains("not issued by"), "{why}");
    }

    #[test]
    fn a_rotation_record_that_cannot_be_read_is_a_problem_naming_it() {
        let data = ca_secret(&ca());
        let unknown = Annotations::from([(STEP_ANNOTATION.into(), "Halfway".into())]);
        let problems = ca_record("demo-ca", &data, &unknown, NOW).unwrap_err();
        assert!(
            problems[0].to_string().contains("unknown step"),
            "{problems:?}"
        );
        let no_next = Annotations::from([
            (STEP_ANNOTATION.into(), "TrustNewCA".into()),
            (SINCE_ANNOTATION.into(), NOW.to_string()),
        ]);
        let problems = ca_record("demo-ca", &data, &no_next, NOW).unwrap_err();
        assert_eq!(
            problems[0].to_string(),
            "Secret demo-ca key next.crt: missing"
        );
    }

    #[test]
    fn the_trust_digest_counts_the_set_of_cas_not_their_order() {
        let (a, b) = (ca(), other_ca());
        let ab = [a.cert_pem.as_bytes(), b.cert_pem.as_bytes()].concat();
        let ba = [b.cert_pem.as_bytes(), a.cert_pem.as_bytes()].concat();
        assert_eq!(digest(&ab), digest(&ba));
        assert_ne!(digest(&ab), digest(a.cert_pem.as_bytes()));
        assert_ne!(
            trust_digest(a.cert_pem.as_bytes(), b.cert_pem.as_bytes()),
            trust_digest(b.cert_pem.as_bytes(), a.cert_pem.as_bytes()),
            "peer and server bundles are told apart"
        );
        assert_eq!(digest(b"not a certificate"), None);
    }

    #[test]
    fn the_operator_keeps_its_client_certificate_while_a_step_rewrites_it() {
        // Just after a step is recorded, every leaf Secret still holds the bundle of the
        // step before: they are all to rewrite, and the operator's client certificate in
        // them still works, so it keeps reaching etcd (else it could not act at all).
        let old = ca();
        let start = record(&ca_secret(&old), &Annotations::new(), NOW);
        let datas = Role::ALL.map(|role| issued(role, &old));
        let leaves =
            [0, 1, 2].map(|i| (Role::ALL[i], found(Role::ALL[i].label(), Some(&datas[i]))));
        for from in [None, Some(TrustNewCa)] {
            let mut rec = start.clone();
            let mut ann = Annotations::new();
            for step_from in [None, Some(TrustNewCa)] {
                if step_from == from {
                    break;
                }
                (rec, ann) = step(&rec, ann, step_from, NOW);
            }
            let (next, _) = step(&rec, ann, from, NOW);
            let verdict = auto_verdict(
                CaState::Valid(Box::new(next)),
                &leaves,
                &names(),
                Renewal::default(),
                NOW,
            );
            assert_eq!(
                verdict.observation.to_issue.len(),
                3,
                "{:?}",
                verdict.observation
            );
            assert!(!verdict.observation.missing);
            assert!(verdict.observation.problems.is_empty());
            assert!(
                verdict.identity.is_some(),
                "after {from:?}: no client identity"
            );
        }
    }
}
