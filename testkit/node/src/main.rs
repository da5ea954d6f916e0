//! etcd-operator-node: a process node that plays the kubelet for one Node, so a local
//! control plane without containers can run real etcd pods as local processes.

mod binder;
mod cli;
mod command;
mod crilog;
mod ctx;
mod dispatcher;
mod envvars;
mod etcfiles;
mod expand;
mod images;
mod imagestore;
mod keysync;
mod killcmd;
mod kubeletapi;
mod launch;
mod log;
mod logcap;
mod logserve;
mod nodereg;
mod phase;
mod pod;
mod podnet;
mod prepare;
mod probe;
mod procinfo;
mod record;
mod restart;
mod rooted;
mod run;
mod secctx;
mod servingcert;
mod signals;
mod statedir;
mod status;
mod storage;
mod tasks;
mod tokens;
mod volumes;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        // Before any thread exists: unsharing a mount namespace needs a single thread.
        Command::ContainerInit(args) => {
            let err = rooted::enter(&args.spec);
            eprintln!("etcd-operator-node: container setup failed: {err}");
            ExitCode::from(rooted::SETUP_FAILED as u8)
        }
        Command::Run(args) => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(e) => {
                    eprintln!("etcd-operator-node: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(run::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("etcd-operator-node: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Kill(args) => {
            let result = signals::parse_signal(&args.signal).and_then(|sig| match &args.pod {
                Some(pod) => killcmd::kill_pod(&args.state_dir, &args.namespace, pod, sig),
                None => killcmd::kill_all(&args.state_dir, sig),
            });
            match result {
                Ok(lines) => {
                    for line in lines {
                        println!("{line}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("etcd-operator-node kill: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
