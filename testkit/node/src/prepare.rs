//! From a container spec to a launch: the image mapped to a program (an image built here,
//! or etcd/busybox mapped to local programs), the pod's volumes made real, its
//! `/etc/hosts` and `/etc/resolv.conf` written, the environment resolved, the command
//! expanded, the mounts listed; for an image built here, its root and the identity its
//! security context asks for.

use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::{Api, Client};

use crate::ctx::NodeCtx;
use crate::envvars::{self, PodFacts, RefData};
use crate::etcfiles::{self, PodEtc};
use crate::images::{self, Program};
use crate::imagestore::LocalImage;
use crate::launch::{self, LaunchSpec, RootSetup};
use crate::statedir::PodDir;
use crate::volumes::Mount;
use crate::{keysync, secctx, tokens, volumes};

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

/// What runs an image: one built here, else an etcd or busybox image mapped to local
/// programs.
async fn program(ctx: &NodeCtx, image: &str) -> Result<Program, NotStartable> {
    match ctx.images.resolve(image).await {
        Ok(Some(local)) => Ok(Program::Image(Box::new(local))),
        Ok(None) => images::resolve(image, &ctx.etcd).map_err(NotStartable::Image),
        Err(e) => Err(NotStartable::Image(format!("image {image}: {e}"))),
    }
}

/// The environment every container starts from, before its `envFrom` and `env`: the
/// image's (or the default PATH and HOME of a process on the host), the hostname, and the
/// `kubernetes` Service's variables (its ClusterIP, as a kubelet sets them).
fn base_env(ctx: &NodeCtx, program: &Program, hostname: &str) -> Vec<(String, String)> {
    let mut base = match program {
        Program::Image(image) => envvars::image_env(&image.config.env),
        _ => vec![
            ("PATH".to_string(), IMAGE_PATH.to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ],
    };
    if !base.iter().any(|(k, _)| k == "PATH") {
        base.insert(0, ("PATH".to_string(), IMAGE_PATH.to_string()));
    }
    base.retain(|(k, _)| k != "HOSTNAME");
    base.push(("HOSTNAME".to_string(), hostname.to_string()));
    base.extend(envvars::kubernetes_service_env(&ctx.api_host, ctx.api_port));
    base
}

/// The pod's volumes made real (projected ones only for a container rooted in its image),
/// its service-account tokens kept fresh, its configMap and secret volumes in step with
/// their objects.
async fn pod_volumes(
    ctx: &NodeCtx,
    pod: &Pod,
    dir: &PodDir,
    rooted: bool,
) -> Result<volumes::Materialized, NotStartable> {
    let mut volumes = volumes::materialize(&ctx.client, &ctx.node_name, pod, dir, rooted)
        .await
        .map_err(|message| NotStartable::Config {
            reason: "ContainerCreating",
            message,
        })?;
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let synced = std::mem::take(&mut volumes.synced);
    if !synced.is_empty() {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let sync = keysync::keep_synced(ctx.client.clone(), namespace, synced);
        ctx.keep_volume_sync(uid, sync);
    }
    let tokens = std::mem::take(&mut volumes.tokens);
    if !tokens.is_empty() {
        let refresher = tokens::keep_fresh(ctx.client.clone(), tokens::Binding::of(pod), tokens);
        ctx.keep_tokens(pod.metadata.uid.as_deref().unwrap_or_default(), refresher);
    }
    Ok(volumes)
}

/// The pod's own `/etc/hosts` and `/etc/resolv.conf`, mounted read-only over the host's
/// in the private mount namespace of a process on the host.
fn etc_mounts(etc: &PodEtc) -> [Mount; 2] {
    let mount = |source: &Path, target: &str| Mount {
        source: source.to_path_buf(),
        target: target.to_string(),
        read_only: true,
    };
    [
        mount(&etc.hosts, "/etc/hosts"),
        mount(&etc.resolv_conf, "/etc/resolv.conf"),
    ]
}

/// Prepares `container` of `pod` (address `ip`, in the network namespace `netns` unless on
/// the host's network, state in `dir`) for launch as its process number `attempt` (its
/// restart count).
pub async fn prepare(
    ctx: &NodeCtx,
    pod: &Pod,
    dir: &PodDir,
    (ip, netns): (&str, Option<&Path>),
    container: &Container,
    attempt: i32,
) -> Result<Prepared, NotStartable> {
    let config =
        |reason: &'static str| move |message: String| NotStartable::Config { reason, message };
    let image = container.image.clone().unwrap_or_default();
    let program = program(ctx, &image).await?;
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let volumes = pod_volumes(ctx, pod, dir, matches!(program, Program::Image(_))).await?;
    let refs = fetch_refs(&ctx.client, &ns, container)
        .await
        .map_err(config("CreateContainerConfigError"))?;
    let facts = PodFacts::of(pod, ip, &ctx.host_ip);
    let hostname = pod_hostname(pod);
    let base = base_env(ctx, &program, &hostname);
    let mut env = envvars::build_env(container, &facts, &refs, &base)
        .map_err(config("CreateContainerConfigError"))?;
    let mut mounts = volumes::mounts_for(container, &volumes.paths, &env)
        .map_err(config("CreateContainerConfigError"))?;
    let etc = etcfiles::write(&dir.path().join("etc"), pod, ip, &ctx.dns)
        .map_err(|e| format!("writing the pod's /etc/hosts and /etc/resolv.conf: {e}"))
        .map_err(config("ContainerCreating"))?;
    let argv = crate::command::container_argv(
        &program,
        container.command.as_deref().unwrap_or_default(),
        container.args.as_deref().unwrap_or_default(),
        &env,
    )
    .map_err(config("CreateContainerError"))?;
    let (bin_overlay, root, image_dir) = match &program {
        Program::Etcd(release) => {
            mounts.extend(etc_mounts(&etc));
            let overlay = launch::etcd_overlay(&ctx.state.images(), release);
            (overlay, None, "/")
        }
        Program::HostTools => {
            mounts.extend(etc_mounts(&etc));
            (None, None, "/")
        }
        Program::Image(image) => {
            let root = root_setup(pod, container, image, dir, &etc, &mut env)
                .map_err(config("CreateContainerConfigError"))?;
            (None, Some(root), image.config.working_dir.as_str())
        }
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
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| image_dir.to_string()),
        log_path: dir.log(&container.name),
        attempt_log: dir
            .attempt_logs(&container.name)
            .join(format!("{attempt}.log")),
        root,
        netns: netns.map(Path::to_path_buf),
    };
    Ok(Prepared { program, spec })
}

/// The root and identity of a container of an image built here: the security context
/// merged and checked (`runAsNonRoot`) as the kubelet does, the user resolved in the
/// image; `HOME` set from the image's passwd unless the environment has one.
fn root_setup(
    pod: &Pod,
    container: &Container,
    image: &LocalImage,
    dir: &PodDir,
    etc: &PodEtc,
    env: &mut Vec<(String, String)>,
) -> Result<RootSetup, String> {
    let sc = secctx::effective(pod, container);
    let image_user = secctx::ImageUser::parse(&image.config.user);
    secctx::verify_run_as_non_root(&sc, &image_user, &secctx::pod_label(pod), &container.name)?;
    let read = |p: &str| std::fs::read_to_string(image.rootfs.join(p)).unwrap_or_default();
    let id = secctx::resolve_identity(&sc, &image_user, &read("etc/passwd"), &read("etc/group"))?;
    if !env.iter().any(|(k, _)| k == "HOME") {
        env.push(("HOME".to_string(), id.home.clone()));
    }
    let all: Vec<String> = caps::all().iter().map(|c| c.to_string()).collect();
    Ok(RootSetup {
        lower: image.rootfs.clone(),
        dir: dir.container(&container.name),
        read_only: sc.read_only_root,
        hosts: Some(etc.hosts.clone()),
        resolv_conf: Some(etc.resolv_conf.clone()),
        uid: id.uid,
        gid: id.gid,
        groups: id.groups,
        capabilities: secctx::capabilities(&sc, &all).into_iter().collect(),
        no_new_privs: secctx::no_new_privs(&sc),
    })
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
