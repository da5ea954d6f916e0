//! From a container spec to a launch: the image mapped to a program, the pod's volumes made
//! real, the environment resolved, the command expanded, the mounts listed.

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::{Api, Client};

use crate::ctx::NodeCtx;
use crate::envvars::{self, PodFacts, RefData};
use crate::images::{self, Program};
use crate::launch::{self, LaunchSpec};
use crate::statedir::PodDir;
use crate::volumes;

/// The default PATH of container images.
pub const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A container ready to be started.
#[derive(Debug)]
pub struct Prepared {
    /// What its image maps to.
    pub program: Program,
    /// How to start it.
    pub spec: LaunchSpec,
}

/// Why a container cannot start now.
#[derive(Debug, PartialEq, Eq)]
pub enum NotStartable {
    /// Its image maps to nothing on this node (`ErrImagePull`); only a new image helps.
    Image(String),
    /// Something it needs is missing or wrong; worth retrying later.
    Config {
        /// The waiting reason a kubelet would give.
        reason: &'static str,
        /// Detail.
        message: String,
    },
}

/// The pod's hostname: `spec.hostname`, else its name (at most 63 characters).
pub fn pod_hostname(pod: &Pod) -> String {
    let mut h = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    h.truncate(63);
    h
}

async fn fetch_refs(client: &Client, ns: &str, container: &Container) -> Result<RefData, String> {
    let (cms, secrets) = envvars::referenced_objects(container);
    let mut data = RefData::default();
    for name in cms {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        if let Some(cm) = api.get_opt(&name).await.map_err(|e| e.to_string())? {
            data.config_maps.insert(name, cm.data.unwrap_or_default());
        }
    }
    for name in secrets {
        let api: Api<Secret> = Api::namespaced(client.clone(), ns);
        if let Some(s) = api.get_opt(&name).await.map_err(|e| e.to_string())? {
            let map = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            data.secrets.insert(name, map);
        }
    }
    Ok(data)
}

/// Prepares `container` of `pod` (address `ip`, state in `dir`) for launch.
pub async fn prepare(
    ctx: &NodeCtx,
    pod: &Pod,
    dir: &PodDir,
    ip: &str,
    container: &Container,
) -> Result<Prepared, NotStartable> {
    let config =
        |reason: &'static str| move |message: String| NotStartable::Config { reason, message };
    let image = container.image.clone().unwrap_or_default();
    let program = images::resolve(&image, &ctx.etcd).map_err(NotStartable::Image)?;
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let volume_list = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let volumes = volumes::materialize(&ctx.client, &ns, dir, &volume_list)
        .await
        .map_err(config("ContainerCreating"))?;
    let refs = fetch_refs(&ctx.client, &ns, container)
        .await
        .map_err(config("CreateContainerConfigError"))?;
    let facts = PodFacts::of(pod, ip, &ctx.host_ip);
    let hostname = pod_hostname(pod);
    let base = vec![
        ("PATH".to_string(), IMAGE_PATH.to_string()),
        ("HOSTNAME".to_string(), hostname.clone()),
        ("HOME".to_string(), "/root".to_string()),
    ];
    let env = envvars::build_env(container, &facts, &refs, &base)
        .map_err(config("CreateContainerConfigError"))?;
    let mounts = volumes::mounts_for(container, &volumes, &env)
        .map_err(config("CreateContainerConfigError"))?;
    let argv = crate::command::container_argv(
        &program,
        container.command.as_deref().unwrap_or_default(),
        container.args.as_deref().unwrap_or_default(),
        &env,
    )
    .map_err(config("CreateContainerError"))?;
    let bin_overlay = match &program {
        Program::Etcd(release) => launch::etcd_overlay(&ctx.state.images(), release),
        Program::HostTools => None,
    };
    let spec = LaunchSpec {
        argv,
        env,
        mounts,
        bin_overlay,
        hostname,
        working_dir: container
            .working_dir
            .clone()
            .unwrap_or_else(|| "/".to_string()),
        log_path: dir.log(&container.name),
    };
    Ok(Prepared { program, spec })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    #[test]
    fn hostname_prefers_spec_hostname_and_is_truncated() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("x".repeat(70));
        assert_eq!(pod_hostname(&pod).len(), 63);
        pod.spec = Some(PodSpec {
            hostname: Some("m1".into()),
            ..Default::default()
        });
        assert_eq!(pod_hostname(&pod), "m1");
    }
}
