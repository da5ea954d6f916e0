//! Command-line interface: `etcd-operator [run] [flags]`, `etcd-operator crd`, and the
//! one-shot steps member pods run in their init containers.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use etcd_operator_actors::cluster::ClusterConfig;
use etcd_operator_core::lifecycle::Deadlines;

use crate::api::images::ImagePolicy;
use crate::backup::scope::EndpointPolicy;
use crate::controller::{LeaseSettings, Settings};
use crate::http::serving::CertSource;
use crate::logging::{LogFormat, logger};

/// A Kubernetes operator that creates and runs etcd clusters.
#[derive(Debug, Parser)]
#[command(name = "etcd-operator", version, about)]
pub struct Cli {
    /// What to do (default: run).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags of `run` when no subcommand is given.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator.
    Run(RunArgs),
    /// Print the CRDs as YAML (the content of manifests/10-crd.yaml).
    Crd {
        /// Which CRDs: all (manifests/10-crd.yaml), or one of them (the chart's crds/).
        #[arg(long, value_enum, default_value = "all")]
        only: crate::api::CrdSelection,
    },
    /// Fetch a snapshot from an S3 store into a file, checking its size, its sha256 and
    /// etcd's own checksum (the first init container of a restoring seed).
    SnapshotFetch(FetchArgs),
    /// Move a restored data directory into place unless the member has one, and remove
    /// the fetched snapshot (the last init container of a restoring seed).
    SnapshotPlace(PlaceArgs),
    /// Wait until the members list this member's peer URL, asking them on their peer
    /// listener (the init container of a prepared joiner: its etcd starts once it is a
    /// member). Never asks about its own name.
    AwaitMembership(AwaitArgs),
}

/// Flags of `await-membership`.
#[derive(Debug, Clone, Args)]
pub struct AwaitArgs {
    /// This member's peer URL, as the operator adds it.
    #[arg(long)]
    pub peer_url: String,
    /// The peer URLs of the members it joins, comma-separated: asked on their peer
    /// listener (`GET /members`).
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "endpoints",
        conflicts_with = "endpoints"
    )]
    pub peers: Vec<String>,
    /// The client URLs of the members it joins, comma-separated: asked on their client
    /// listener (etcd's JSON gateway, `/v3/cluster/member/list`).
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// With TLS: the CA bundle of the members' certificates on the listener asked.
    #[arg(long, requires_all = ["cert", "key"])]
    pub cacert: Option<std::path::PathBuf>,
    /// With TLS: the client certificate to present.
    #[arg(long, requires_all = ["cacert", "key"])]
    pub cert: Option<std::path::PathBuf>,
    /// With TLS: its private key.
    #[arg(long, requires_all = ["cacert", "cert"])]
    pub key: Option<std::path::PathBuf>,
    /// The member's data directory: when etcd has written its member there, the pod ran
    /// as a member before, and etcd starts without waiting.
    #[arg(long)]
    pub data_dir: Option<std::path::PathBuf>,
    /// Milliseconds between two rounds of questions (each is one small request per
    /// member, only while a joiner waits; etcd starts at most this long after its add).
    #[arg(long, default_value_t = 50)]
    pub interval_ms: u64,
    /// Deadline of one question, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u64,
}

/// Flags of `snapshot-fetch`.
#[derive(Debug, Clone, Args)]
pub struct FetchArgs {
    /// Bucket.
    #[arg(long)]
    pub bucket: String,
    /// The snapshot's key.
    #[arg(long)]
    pub key: String,
    /// sha256 (hex) it must have.
    #[arg(long)]
    pub sha256: String,
    /// Bytes it must have.
    #[arg(long)]
    pub size: u64,
    /// URL of an S3-compatible store (default: AWS).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Path-style addressing of the bucket.
    #[arg(long)]
    pub force_path_style: bool,
    /// Directory of the mounted credentials Secret.
    #[arg(long)]
    pub credentials: std::path::PathBuf,
    /// The file to write.
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// Where etcd's tool restores next: a directory left there by an interrupted
    /// earlier run is removed first.
    #[arg(long)]
    pub restored_dir: std::path::PathBuf,
    /// The member's data directory: when it exists, nothing is fetched and `--out` gets
    /// an empty placeholder snapshot for etcd's tool, whose restore `snapshot-place`
    /// throws away.
    #[arg(long)]
    pub data_dir: std::path::PathBuf,
}

/// Flags of `snapshot-place`.
#[derive(Debug, Clone, Args)]
pub struct PlaceArgs {
    /// The data directory etcd's tool restored.
    #[arg(long)]
    pub restored_dir: std::path::PathBuf,
    /// The member's data directory.
    #[arg(long)]
    pub data_dir: std::path::PathBuf,
    /// The fetched snapshot, removed.
    #[arg(long)]
    pub snapshot: std::path::PathBuf,
}

/// Flags of `run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Only manage EtcdClusters in this namespace (default: every namespace).
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    pub namespace: String,
    /// Address of the HTTPS server (/healthz, /readyz, /metrics, /debug/...).
    #[arg(long, env = "LISTEN_ADDRESS", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// The HTTPS server's certificate chain (PEM), re-read when it changes; without it the
    /// operator serves a self-signed certificate made at start.
    #[arg(long, env = "TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// The private key (PEM) of `--tls-cert-file`.
    #[arg(long, env = "TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<std::path::PathBuf>,
    /// Most `/debug/stream` subscriptions one user (as the token's TokenReview names
    /// them) may hold at once.
    #[arg(long, default_value_t = crate::http::stream_slots::DEFAULT_PER_IDENTITY)]
    pub debug_stream_per_identity: usize,
    /// Milliseconds between ticks of a cluster while nothing happens.
    #[arg(long, default_value_t = 2000)]
    pub tick_interval_ms: u64,
    /// Milliseconds before the follow-up tick after a tick that acted or while a change is
    /// under way (a member starting, a refused add retried).
    #[arg(long, default_value_t = 100)]
    pub follow_up_ms: u64,
    /// Longest time between ticks of a settled cluster (every member healthy, the spec
    /// met, nothing pending), in milliseconds: the wait doubles from the tick interval up
    /// to this, and any event brings it back to fast.
    #[arg(long, default_value_t = 20_000)]
    pub idle_interval_ms: u64,
    /// Read timeout of each Kubernetes API call (not watches), in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub api_timeout_ms: u64,
    /// Deadline of each etcd call (connecting, trying each member, the request), in
    /// milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub etcd_timeout_ms: u64,
    /// Deadline of a whole tick of one cluster, in seconds.
    #[arg(long, default_value_t = 60)]
    pub tick_timeout_s: u64,
    /// Shortest time between two writes of a cluster's status that differ only in their
    /// messages, in milliseconds (a change of phase, reason, members or conditions is
    /// written at once).
    #[arg(long, default_value_t = 5000)]
    pub status_rewording_ms: u64,
    /// Seconds a member may stay added-but-not-started before it is removed.
    #[arg(long, default_value_t = 90)]
    pub unstarted_member_deadline_s: u64,
    /// Seconds a member may stay unhealthy before it is replaced.
    #[arg(long, default_value_t = 120)]
    pub unhealthy_member_deadline_s: u64,
    /// Seconds an upgraded member has to be healthy on its new version before the upgrade
    /// halts and the member is rolled back.
    #[arg(long, default_value_t = 60)]
    pub upgraded_member_deadline_s: u64,
    /// Seconds every member's pod must have been Ready, its address published, before a
    /// rolling restart restarts the next member: at least the cluster DNS's TTL (a
    /// restarted member's new address reaches the others only once their cached answers
    /// expire; CoreDNS's kubernetes plugin: 5 by default, kubeadm sets 30).
    #[arg(long, default_value_t = 30)]
    pub restart_settle_s: u64,
    /// Elect a leader through a Lease so only one replica acts.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "etcd-operator")]
    pub lease_name: String,
    /// This replica's identity in the Lease (default: the pod name or host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Log format: json (default in a cluster) or term.
    #[arg(long, env = "LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log level: trace, debug, info, warning, error.
    #[arg(long, env = "LOG_LEVEL", default_value = "info", value_parser = parse_level)]
    pub log_level: slog::Level,
    /// Let EtcdBackups dial etcd endpoints outside their own namespace (another
    /// namespace's Services and pods, addresses and names outside the cluster). Off: a
    /// backup dials only pods of its namespace, so that creating an EtcdBackup reads no
    /// etcd its author could not reach themselves.
    #[arg(long, env = "ALLOW_BACKUP_ENDPOINTS_OUTSIDE_NAMESPACE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_backup_endpoints_outside_namespace: bool,
    /// The image repositories EtcdClusters may name in `spec.repository`, comma-separated;
    /// an entry ending in `/` allows every repository under it. A cluster naming another
    /// is blocked (`ImageNotAllowed`) before any pod is made.
    #[arg(
        long,
        env = "ALLOWED_IMAGE_REPOSITORIES",
        value_delimiter = ',',
        default_values = crate::api::images::OFFICIAL_REPOSITORIES
    )]
    pub allowed_image_repositories: Vec<String>,
    /// The operator's own image, run by the init containers that fetch a restored seed's
    /// snapshot (default: read from the operator's pod, POD_NAME in POD_NAMESPACE).
    #[arg(long, env = "ETCD_OPERATOR_IMAGE")]
    pub operator_image: Option<String>,
}

/// The names a self-signed serving certificate covers: loopback, the listen address when
/// it names one, and this replica's host name.
fn self_signed_names(listen: SocketAddr, identity: &str) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !listen.ip().is_unspecified() && !listen.ip().is_loopback() {
        names.push(listen.ip().to_string());
    }
    if !identity.is_empty() && !names.iter().any(|n| n == identity) {
        names.push(identity.to_string());
    }
    names
}

fn parse_level(s: &str) -> Result<slog::Level, String> {
    s.parse()
        .map_err(|()| format!("unknown log level {s:?}: use trace, debug, info, warning or error"))
}

impl RunArgs {
    /// The controller's settings from these flags.
    pub fn settings(&self) -> Settings {
        let identity = self.identity.clone().unwrap_or_else(|| {
            std::env::var("HOSTNAME")
                .unwrap_or_else(|_| format!("etcd-operator-{}", std::process::id()))
        });
        let serving = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => CertSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            _ => CertSource::SelfSigned(self_signed_names(self.listen, &identity)),
        };
        Settings {
            namespace: self.namespace.clone(),
            listen: self.listen,
            serving,
            debug_stream_per_identity: self.debug_stream_per_identity,
            api_timeout: Duration::from_millis(self.api_timeout_ms),
            etcd_timeout: Duration::from_millis(self.etcd_timeout_ms),
            cluster: ClusterConfig {
                tick_interval: Duration::from_millis(self.tick_interval_ms),
                follow_up: Duration::from_millis(self.follow_up_ms),
                idle_interval: Duration::from_millis(self.idle_interval_ms),
                tick_timeout: Duration::from_secs(self.tick_timeout_s),
                status_rewording: Duration::from_millis(self.status_rewording_ms),
                deadlines: Deadlines {
                    unstarted_member: Duration::from_secs(self.unstarted_member_deadline_s),
                    unhealthy_member: Duration::from_secs(self.unhealthy_member_deadline_s),
                    upgraded_member: Duration::from_secs(self.upgraded_member_deadline_s),
                    restart_settle: Duration::from_secs(self.restart_settle_s),
                },
            },
            lease: LeaseSettings {
                elect: self.leader_elect,
                namespace: self.lease_namespace.clone(),
                name: self.lease_name.clone(),
            },
            identity,
            operator_image: self.operator_image.clone(),
            backup_endpoints: if self.allow_backup_endpoints_outside_namespace {
                EndpointPolicy::Anywhere
            } else {
                EndpointPolicy::OwnNamespace
            },
            images: ImagePolicy::new(self.allowed_image_repositories.iter().cloned()),
        }
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Crd { only }) => {
            print!("{}", crate::api::crd_yaml(only));
            ExitCode::SUCCESS
        }
        Some(Command::Run(args)) => run(args),
        Some(Command::SnapshotFetch(args)) => report(fetch(&args)),
        Some(Command::SnapshotPlace(args)) => report(place(&args)),
        Some(Command::AwaitMembership(args)) => report(await_membership(&args)),
        None => run(cli.run),
    }
}

/// Why a one-shot subcommand of a member's pod failed.
#[derive(Debug, thiserror::Error)]
enum StepError {
    /// The async runtime could not start.
    #[error("starting the runtime: {0}")]
    Runtime(std::io::Error),
    /// The joiner's gate cannot ask.
    #[error(transparent)]
    Gate(#[from] crate::join_gate::GateError),
    /// The directory for the snapshot could not be made ready.
    #[error("preparing {path}: {source}")]
    Prepare {
        /// The snapshot file to be written.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The snapshot could not be fetched or verified.
    #[error(transparent)]
    Fetch(#[from] crate::restore::fetch::FetchError),
    /// The restored data could not be placed.
    #[error("placing {path}: {source}")]
    Place {
        /// The restored directory.
        path: std::path::PathBuf,
        /// The error.
        source: crate::restore::fetch::PlaceError,
    },
}

/// A runtime for one subcommand on this thread.
fn runtime() -> Result<tokio::runtime::Runtime, StepError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StepError::Runtime)
}

fn await_membership(args: &AwaitArgs) -> Result<String, StepError> {
    use crate::join_gate::{Api, Gate, GateTls};
    let tls = match (&args.cacert, &args.cert, &args.key) {
        (Some(ca), Some(cert), Some(key)) => Some(GateTls {
            ca: ca.clone(),
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => None,
    };
    let (ask, api) = match args.endpoints.is_empty() {
        true => (args.peers.clone(), Api::Peer),
        false => (args.endpoints.clone(), Api::Client),
    };
    let gate = Gate {
        peer_url: args.peer_url.clone(),
        ask,
        api,
        tls,
        interval: Duration::from_millis(args.interval_ms),
        timeout: Duration::from_millis(args.timeout_ms),
        data_dir: args.data_dir.clone(),
    };
    Ok(
        runtime()?.block_on(crate::join_gate::await_membership(&gate, |waiting| {
            println!("{waiting}")
        }))?,
    )
}

/// Prints what a one-shot subcommand did (or why it failed) and exits accordingly.
fn report(result: Result<String, StepError>) -> ExitCode {
    match result {
        Ok(done) => {
            println!("{done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn fetch(args: &FetchArgs) -> Result<String, StepError> {
    use crate::restore::fetch::{
        Expected, FetchError, Prepared, fetch_snapshot, prepare, s3_credentials, s3_store,
    };
    let prepared = prepare(&args.restored_dir, &args.data_dir, &args.out).map_err(|source| {
        StepError::Prepare {
            path: args.out.clone(),
            source,
        }
    })?;
    if prepared == Prepared::DataInPlace {
        return Ok(format!(
            "{} holds the member's data already (an earlier run placed it): nothing is \
             fetched, and etcd's tool restores an empty placeholder that is thrown away",
            args.data_dir.display()
        ));
    }
    let credentials = s3_credentials(&args.credentials)?;
    let endpoint = args.endpoint.as_deref().filter(|e| !e.is_empty());
    let store = s3_store(&args.bucket, endpoint, args.force_path_style, credentials)
        .map_err(FetchError::Store)?;
    let expected = Expected {
        key: args.key.clone(),
        sha256: args.sha256.clone(),
        size: args.size,
    };
    runtime()?.block_on(fetch_snapshot(&store, &expected, &args.out))?;
    Ok(format!(
        "fetched {}/{} ({} bytes, sha256 {}, etcd's checksum verified) into {}",
        args.bucket,
        args.key,
        args.size,
        args.sha256,
        args.out.display()
    ))
}

fn place(args: &PlaceArgs) -> Result<String, StepError> {
    use crate::restore::fetch::{Placed, place};
    let placed = place(&args.restored_dir, &args.data_dir, &args.snapshot).map_err(|source| {
        StepError::Place {
            path: args.restored_dir.clone(),
            source,
        }
    })?;
    Ok(match placed {
        Placed::Moved => format!(
            "the restored data is the member's data directory {}",
            args.data_dir.display()
        ),
        Placed::Kept => format!(
            "{} holds the member's data already (an earlier run placed it) and stays; \
             the restored copy was removed",
            args.data_dir.display(),
        ),
    })
}

fn run(args: RunArgs) -> ExitCode {
    let (log, flush) = logger(args.log_format, args.log_level);
    crate::logging::forward_library_events(&log);
    let system = actix::System::new();
    let result = system.block_on(crate::controller::run(args.settings(), log.clone()));
    let code = match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            slog::crit!(log, "operator stopped"; "error" => %e);
            ExitCode::FAILURE
        }
    };
    drop(flush);
    code
}
