//! `etcd-operator-resizer --kubeconfig FILE --provisioner NAME`: expands the volumes of the
//! claims that provisioner made (testkit/env/volumes/local-path.sh runs it beside Rancher's
//! local-path-provisioner). Every change of a claim, and every few seconds, each bound
//! claim of the provisioner that asks for more than its volume holds has the volume's
//! capacity raised and its status reported, as an external resizer does.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use etcd_operator_resizer::provisioned_by;
use etcd_operator_resizer::resize::{self, Resize};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Api, Client, Config};

/// The command line.
#[derive(Parser, Debug)]
#[command(version, about = "Expands the volumes of one provisioner's claims")]
struct Args {
    /// The kubeconfig to reach the API server with.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The provisioner whose claims are expanded (`rancher.io/local-path`).
    #[arg(long)]
    provisioner: String,
    /// Seconds between passes when nothing changes.
    #[arg(long, default_value_t = 5)]
    resync_seconds: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let kubeconfig = Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    log(&format!("expanding the claims of {}", args.provisioner));
    let claims = Api::<PersistentVolumeClaim>::all(client.clone());
    let mut changes = watcher(claims, watcher::Config::default()).boxed();
    let mut resync = tokio::time::interval(Duration::from_secs(args.resync_seconds));
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(_)) => {}
                Some(Err(e)) => log(&format!("watching claims: {e}")),
                None => anyhow::bail!("the watch of claims ended"),
            },
            _ = resync.tick() => {}
        }
        if let Err(e) = pass(&client, &args.provisioner).await {
            log(&format!("listing claims and volumes: {e}"));
        }
    }
}

/// One look at every claim of `provisioner`.
async fn pass(client: &Client, provisioner: &str) -> kube::Result<()> {
    let claims = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let volumes = Api::<PersistentVolume>::all(client.clone());
    for claim in claims
        .items
        .iter()
        .filter(|c| provisioned_by(c, provisioner))
    {
        let Some(name) = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) else {
            continue;
        };
        let Some(pv) = volumes.get_opt(name).await? else {
            continue;
        };
        resize_one(client, claim, &pv).await;
    }
    Ok(())
}

/// Expands `claim`'s volume `pv`, or finishes the report of an expansion, when it asks.
async fn resize_one(client: &Client, claim: &PersistentVolumeClaim, pv: &PersistentVolume) {
    let key = format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    );
    let step = match resize::step(claim, pv) {
        Ok(Some(step)) => step,
        Ok(None) => return,
        Err(e) => return log(&format!("claim {key}: cannot compare sizes: {e}")),
    };
    let claims = Api::<PersistentVolumeClaim>::namespaced(
        client.clone(),
        claim.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let params = PatchParams::default();
    let result = async {
        let (claim, to) = match &step {
            Resize::Expand { to } => {
                let started = resize::started_patch(claim, to, jiff::Timestamp::now());
                let claim = claims
                    .patch_status(name, &params, &Patch::Merge(started))
                    .await?;
                Api::<PersistentVolume>::all(client.clone())
                    .patch(
                        pv.metadata.name.as_deref().unwrap_or_default(),
                        &params,
                        &Patch::Merge(resize::capacity_patch(to)),
                    )
                    .await?;
                (claim, to)
            }
            Resize::Finish { to } => (claim.clone(), to),
        };
        let finished = resize::finished_patch(&claim, to);
        claims
            .patch_status(name, &params, &Patch::Merge(finished))
            .await
            .map(|_| to.clone())
    }
    .await;
    match result {
        Ok(to) => log(&format!(
            "claim {key}: volume {} is {to}",
            pv.metadata.name.as_deref().unwrap_or_default()
        )),
        // Another writer was first (a conflict) or the claim is gone: the next pass sees it.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
        Err(e) => log(&format!("claim {key}: resizing failed: {e}")),
    }
}

fn log(message: &str) {
    eprintln!("{} {message}", jiff::Timestamp::now());
}
