//! Cost of one `decide` call for representative observations, next to the cost of cloning
//! the same observation (a same-run baseline, so results can be read as ratios).
//!
//! `cargo bench --bench decision` (add `-- --quick` for a short run).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use etcd_operator_core::lifecycle::{
    Action, BootstrapRecord, Deadlines, DesiredCluster, MemberHealth, MemberView, Membership,
    Observation, Phase, PodPhase, PodView, Reason, Recorded, State, TlsMode, decide,
};
use etcd_operator_core::topology::Topology;
use tokio::time::Instant;

/// The etcd cluster ID of the benchmarked cluster.
const CLUSTER_ID: u64 = 0xbe5c_0001;

const V: &str = "3.5.21";

/// `n` healthy, started voting members with Running pods at `V`; the first one leads.
fn healthy(n: u64) -> Observation {
    let topology = Topology::new("default", "demo");
    let mut members = Vec::new();
    let mut pods = Vec::new();
    let mut health = BTreeMap::new();
    for id in 1..=n {
        let name = format!("demo-m{id}");
        members.push(MemberView {
            id,
            name: name.clone(),
            peer_urls: vec![topology.peer_url(&name, TlsMode::Off)],
            client_urls: vec![topology.client_url(&name, TlsMode::Off)],
            is_learner: false,
        });
        pods.push(PodView::running(&name, V));
        let mut h = MemberHealth::healthy(V);
        h.leader = Some(1);
        health.insert(id, h);
    }
    Observation {
        now: Instant::now(),
        pods,
        services_present: true,
        disruption_budget: Some(2),
        claims: Default::default(),
        claim_class: None,
        recorded: Recorded {
            bootstrap: Some(BootstrapRecord {
                seed: Some("demo-m1".into()),
                token: Some("demo-token".into()),
                cluster_id: Some(CLUSTER_ID),
            }),
            members: Vec::new(),
            reason: "Converged".into(),
            failed_version: None,
            recovery: None,
            revision: None,
            storage: None,
            compacted: None,
        },
        name_conflict: None,
        restore_problem: None,
        tls: Default::default(),
        prepares_joiners: false,
        endpoints: Vec::new(),
        membership: Membership::Listed {
            cluster_id: CLUSTER_ID,
            members,
        },
        health,
        newest_backup: None,
        hashes: None,
    }
}

/// Three members, the second one's pod failed and the member not answering.
fn dead_member() -> Observation {
    let mut obs = healthy(3);
    let pod = obs.pods.iter_mut().find(|p| p.name == "demo-m2").unwrap();
    pod.phase = PodPhase::Failed;
    pod.ready = false;
    obs.health
        .insert(2, MemberHealth::unreachable("connection refused"));
    obs
}

struct Case {
    name: &'static str,
    obs: Observation,
    spec: DesiredCluster,
    expect: Reason,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "converged_3",
            obs: healthy(3),
            spec: DesiredCluster::new(3, V),
            expect: Reason::Converged,
        },
        Case {
            name: "converged_7",
            obs: healthy(7),
            spec: DesiredCluster::new(7, V),
            expect: Reason::Converged,
        },
        Case {
            name: "scale_up_step_3_to_5",
            obs: healthy(3),
            spec: DesiredCluster::new(5, V),
            expect: Reason::AddingMember,
        },
        Case {
            name: "dead_member_of_3",
            obs: dead_member(),
            spec: DesiredCluster::new(3, V),
            expect: Reason::ReplacingDeadMember,
        },
    ]
}

fn running_state() -> State {
    State {
        phase: Phase::Running,
        cluster_id: Some(CLUSTER_ID),
        ..State::default()
    }
}

fn bench_decide(c: &mut Criterion) {
    let deadlines = Deadlines::default();
    for case in cases() {
        // The observation really leads to the decision the case is named after.
        let d = decide(running_state(), &case.obs, &case.spec, &deadlines);
        assert_eq!(d.why.reason, case.expect, "{}", case.name);
        if case.expect == Reason::AddingMember {
            assert!(matches!(d.actions[..], [Action::AddMember { .. }]));
        }

        let mut group = c.benchmark_group(case.name);
        group.bench_function("decide", |b| {
            b.iter_batched(
                running_state,
                |state| decide(state, black_box(&case.obs), &case.spec, &deadlines),
                BatchSize::SmallInput,
            )
        });
        group.bench_function("clone_observation", |b| {
            b.iter(|| black_box(&case.obs).clone())
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_decide
}
criterion_main!(benches);
