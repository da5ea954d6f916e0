//! etcd-operator-node: a process node that plays the kubelet for one Node, so a local
//! control plane without containers can run real etcd pods as local processes.

mod binder;
mod cli;
mod command;
mod ctx;
mod dispatcher;
mod dns;
mod envvars;
mod expand;
mod hosts;
mod hostsync;
mod images;
mod ipam;
mod killcmd;
mod launch;
mod log;
mod nodereg;
mod phase;
mod pod;
mod prepare;
mod probe;
mod procinfo;
mod record;
mod restart;
mod run;
mod signals;
mod statedir;
mod status;
mod tasks;
mod volumes;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => match run::run(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("etcd-operator-node: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Kill(args) => {
            let result = signals::parse_signal(&args.signal).and_then(|sig| {
                killcmd::kill_pod(&args.state_dir, &args.namespace, &args.pod, sig)
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
