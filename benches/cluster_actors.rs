//! 10,000 Cluster actors under one Supervisor, each over a converged 3-member fake cluster:
//! the time for all of them to complete one tick, and the memory each actor costs.
//!
//! `cargo bench --bench cluster_actors` (add `-- --quick` for a short run;
//! `CLUSTER_ACTORS=1000` for another fleet size).
//!
//! A round sends every cluster a spec with a new generation through the Supervisor
//! (`WatchEvent::Applied`), which wakes its actor at once (the tick interval is an hour, so
//! no actor ticks on its own), and waits until the tick counter has advanced by the fleet's size.
//! Each of those ticks observes pods, lists members, asks each of the 3 members for its
//! status, decides, and writes the status (its `observedGeneration` changed). The same
//! round with an unchanged spec, which the actors ignore, is measured as the baseline cost
//! of delivering the events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use criterion::{Criterion, Throughput};
use etcd_operator_actors::cluster::ClusterConfig;
use etcd_operator_actors::metrics::Telemetry;
use etcd_operator_actors::roster::WatchEvent;
use etcd_operator_actors::supervisor::{ListClusters, Supervisor};
use etcd_operator_core::lifecycle::DesiredCluster;
use etcd_operator_core::topology::Topology;
use etcd_operator_fakes::{FakeCluster, FakeWiring};
use slog::{Logger, o};

/// Fleet size unless `CLUSTER_ACTORS` says otherwise.
const DEFAULT_CLUSTERS: usize = 10_000;
const MEMBERS: usize = 3;
const VERSION: &str = "3.5.21";

/// How many Cluster actors the fleet has (`CLUSTER_ACTORS`, default 10,000).
fn fleet_size() -> usize {
    std::env::var("CLUSTER_ACTORS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_CLUSTERS)
}

/// Resident set size of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

struct Fleet {
    supervisor: Addr<Supervisor>,
    telemetry: Telemetry,
    clusters: Vec<Topology>,
    generation: i64,
}

impl Fleet {
    fn spec(&self) -> DesiredCluster {
        DesiredCluster {
            generation: self.generation,
            ..DesiredCluster::new(MEMBERS as u32, VERSION)
        }
    }

    fn ticks(&self) -> u64 {
        self.telemetry.metrics.ticks.get()
    }

    /// Waits until the tick counter reaches `target`, letting the actors run meanwhile.
    async fn ticks_reach(&self, target: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.ticks() < target {
            assert!(Instant::now() < deadline, "the actors stopped ticking");
            tokio::task::yield_now().await;
        }
    }

    /// Starts the Supervisor and, through one full list, an actor per cluster; returns once
    /// every actor has completed its first tick.
    async fn start(wiring: Arc<FakeWiring>, clusters: Vec<Topology>) -> Fleet {
        let config = ClusterConfig {
            tick_interval: Duration::from_secs(3600),
            ..ClusterConfig::default()
        };
        let telemetry = Telemetry::default();
        let logger = Logger::root(slog::Discard, o!());
        let supervisor = Supervisor::new(wiring, config, telemetry.clone(), &logger).start();
        let fleet = Fleet {
            supervisor,
            telemetry,
            clusters,
            generation: 1,
        };
        fleet.supervisor.do_send(WatchEvent::RelistStarted);
        for c in &fleet.clusters {
            fleet
                .supervisor
                .do_send(WatchEvent::Relisted(c.clone(), fleet.spec()));
        }
        fleet.supervisor.do_send(WatchEvent::RelistDone);
        fleet.ticks_reach(fleet_size() as u64).await;
        fleet
    }

    fn apply_all(&self) {
        for c in &self.clusters {
            self.supervisor
                .do_send(WatchEvent::Applied(c.clone(), self.spec()));
        }
    }

    /// One tick of every actor, woken by a new generation of its spec.
    async fn tick_round(&mut self) -> Duration {
        let started = Instant::now();
        let target = self.ticks() + fleet_size() as u64;
        self.generation += 1;
        self.apply_all();
        self.ticks_reach(target).await;
        started.elapsed()
    }

    /// The same events with an unchanged spec: delivered, forwarded, ignored.
    async fn event_round(&self) -> Duration {
        let started = Instant::now();
        self.apply_all();
        self.supervisor
            .send(ListClusters)
            .await
            .expect("supervisor alive");
        started.elapsed()
    }
}

fn per_tick(d: Duration) -> Duration {
    d / fleet_size() as u32
}

/// Starts the fleet (every actor's first tick done) and prints what it cost; returns the
/// fleet and the memory per actor in bytes.
fn start_fleet(system: &actix_rt::SystemRunner) -> (Fleet, f64) {
    let wiring = Arc::new(FakeWiring::new());
    let clusters: Vec<Topology> = (0..fleet_size())
        .map(|i| Topology::new("bench", &format!("c{i:04}")))
        .collect();
    for c in &clusters {
        wiring.insert(FakeCluster::running(c.clone(), MEMBERS, VERSION));
    }
    let rss_before = rss_kib();
    let started = Instant::now();
    let fleet = system.block_on(Fleet::start(wiring.clone(), clusters));
    let start_took = started.elapsed();
    let rss_after = rss_kib();
    assert_eq!(fleet.telemetry.metrics.clusters.get(), fleet_size() as i64);
    assert!(
        wiring.clusters().iter().all(|f| f
            .last_status()
            .is_some_and(|s| s.phase == etcd_operator_core::lifecycle::Phase::Running)),
        "every cluster reported Running after its first tick"
    );
    let per_actor = (rss_after.saturating_sub(rss_before)) as f64 * 1024.0 / fleet_size() as f64;
    println!(
        "cluster_actors: started {} actors (+ first tick each) in {start_took:?}; \
         RSS {rss_before} KiB -> {rss_after} KiB = {:.1} KiB per actor \
         (Cluster actor + its MemberClient, first tick done)",
        fleet_size(),
        per_actor / 1024.0
    );
    (fleet, per_actor)
}

/// Which round of the fleet a measurement runs.
#[derive(Clone, Copy)]
enum Round {
    /// Every actor ticks once.
    Tick,
    /// Every actor gets one message (the baseline).
    Event,
}

impl Round {
    async fn run(self, fleet: &mut Fleet) -> Duration {
        match self {
            Round::Tick => fleet.tick_round().await,
            Round::Event => fleet.event_round().await,
        }
    }
}

/// Medians of `rounds` rounds of each kind, outside criterion's statistics.
fn plain_medians(
    system: &actix_rt::SystemRunner,
    fleet: &mut Fleet,
    rounds: usize,
) -> [Vec<Duration>; 2] {
    system.block_on(async {
        let mut ticks = Vec::new();
        let mut events = Vec::new();
        for _ in 0..rounds {
            ticks.push(Round::Tick.run(fleet).await);
            events.push(Round::Event.run(fleet).await);
        }
        ticks.sort();
        events.sort();
        [ticks, events]
    })
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let system = actix_rt::System::new();
    let (mut fleet, per_actor) = start_fleet(&system);

    let mut group = criterion.benchmark_group("cluster_actors");
    group.throughput(Throughput::Elements(fleet_size() as u64));
    let n = fleet_size();
    for (name, round) in [
        (format!("tick_round_{n}_actors"), Round::Tick),
        (format!("event_round_{n}_actors_baseline"), Round::Event),
    ] {
        group.bench_function(&name, |b| {
            b.iter_custom(|iters| {
                system.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += round.run(&mut fleet).await;
                    }
                    total
                })
            })
        });
    }
    group.finish();

    // A plain measurement too, independent of criterion's statistics.
    let [ticks, events] = plain_medians(&system, &mut fleet, 20);
    let (tick, event) = (ticks[ticks.len() / 2], events[events.len() / 2]);
    println!(
        "cluster_actors: one tick of all {n} actors: median {tick:?} \
         (min {:?}) = {:?} per tick; event delivery alone: median {event:?} = {:?} per actor",
        ticks[0],
        per_tick(tick),
        per_tick(event)
    );
    println!(
        "cluster_actors: memory {:.1} KiB per actor (RSS delta / {n}); whole process {} KiB",
        per_actor / 1024.0,
        rss_kib()
    );
    criterion.final_summary();
}
