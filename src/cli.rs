//! Command-line interface: `etcd-operator [run] [flags]` and `etcd-operator crd`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use etcd_operator_actors::cluster::ClusterConfig;
use etcd_operator_actors::lifecycle::Deadlines;

use crate::controller::{LeaseSettings, Settings};
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
}

/// Flags of `run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Only manage EtcdClusters in this namespace (default: every namespace).
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    pub namespace: String,
    /// Address of the HTTP server (/healthz, /readyz, /metrics, /debug/...).
    #[arg(long, env = "LISTEN_ADDRESS", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Milliseconds between ticks of a cluster while nothing happens.
    #[arg(long, default_value_t = 2000)]
    pub tick_interval_ms: u64,
    /// Milliseconds before the follow-up tick after a tick that acted.
    #[arg(long, default_value_t = 250)]
    pub follow_up_ms: u64,
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
        Settings {
            namespace: self.namespace.clone(),
            listen: self.listen,
            api_timeout: Duration::from_millis(self.api_timeout_ms),
            etcd_timeout: Duration::from_millis(self.etcd_timeout_ms),
            cluster: ClusterConfig {
                tick_interval: Duration::from_millis(self.tick_interval_ms),
                follow_up: Duration::from_millis(self.follow_up_ms),
                tick_timeout: Duration::from_secs(self.tick_timeout_s),
                deadlines: Deadlines {
                    unstarted_member: Duration::from_secs(self.unstarted_member_deadline_s),
                    unhealthy_member: Duration::from_secs(self.unhealthy_member_deadline_s),
                    upgraded_member: Duration::from_secs(self.upgraded_member_deadline_s),
                },
            },
            lease: LeaseSettings {
                elect: self.leader_elect,
                namespace: self.lease_namespace.clone(),
                name: self.lease_name.clone(),
            },
            identity,
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
        None => run(cli.run),
    }
}

fn run(args: RunArgs) -> ExitCode {
    let log = logger(args.log_format, args.log_level);
    let system = actix::System::new();
    let result = system.block_on(crate::controller::run(args.settings(), log.clone()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            slog::crit!(log, "operator stopped"; "error" => %e);
            ExitCode::FAILURE
        }
    }
}
