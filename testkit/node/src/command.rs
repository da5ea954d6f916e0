//! Builds the argv a container runs: the image's entrypoint or the container's `command`,
//! then `args`, both `$(VAR)`-expanded, with etcd image paths mapped to local binaries; for
//! an image built here, its `Entrypoint` and `Cmd` combined with them by Kubernetes' rules.

use crate::expand::expand_with;
use crate::images::Program;

/// Where etcd images keep their programs; `command[0]` naming one of them is mapped.
const IMAGE_BIN_DIR: &str = "/usr/local/bin/";

/// The argv for a container, or why it cannot run.
pub fn container_argv(
    program: &Program,
    command: &[String],
    args: &[String],
    env: &[(String, String)],
) -> Result<Vec<String>, String> {
    let command: Vec<String> = command.iter().map(|c| expand_with(c, env)).collect();
    let args = args.iter().map(|a| expand_with(a, env));
    let mut argv: Vec<String> = match program {
        Program::Etcd(release) => {
            if command.is_empty() {
                vec![release.server().display().to_string()]
            } else {
                let mut command = command;
                let name = command[0]
                    .strip_prefix(IMAGE_BIN_DIR)
                    .unwrap_or(&command[0])
                    .to_string();
                if let Some(path) = release.tools.get(&name) {
                    command[0] = path.display().to_string();
                }
                command
            }
        }
        Program::HostTools => {
            if command.is_empty() {
                vec!["sh".to_string()]
            } else {
                command
            }
        }
        Program::Image(image) => {
            let args: Vec<String> = args.collect();
            return nonempty(image_argv(
                &image.config.entrypoint,
                &image.config.cmd,
                command,
                args,
            ));
        }
    };
    argv.extend(args);
    nonempty(argv)
}

/// Kubernetes' rules: `command` replaces the image's `Entrypoint` and drops its `Cmd`;
/// without `command`, `args` replace `Cmd`; without either, the image's own run.
pub fn image_argv(
    entrypoint: &[String],
    cmd: &[String],
    command: Vec<String>,
    args: Vec<String>,
) -> Vec<String> {
    match (command.is_empty(), args.is_empty()) {
        (false, _) => command.into_iter().chain(args).collect(),
        (true, false) => entrypoint.iter().cloned().chain(args).collect(),
        (true, true) => entrypoint.iter().chain(cmd).cloned().collect(),
    }
}

fn nonempty(argv: Vec<String>) -> Result<Vec<String>, String> {
    if argv.first().is_none_or(|a| a.is_empty()) {
        return Err("container has an empty command".to_string());
    }
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::{EtcdRelease, Version};
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    fn etcd() -> Program {
        let mut tools = BTreeMap::new();
        tools.insert("etcd".to_string(), PathBuf::from("/opt/e/etcd"));
        tools.insert("etcdctl".to_string(), PathBuf::from("/opt/e/etcdctl"));
        Program::Etcd(EtcdRelease {
            version: Version(3, 4, 23),
            tools,
        })
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn env() -> Vec<(String, String)> {
        vec![("POD_IP".into(), "127.0.1.3".into())]
    }

    #[test]
    fn etcd_image_without_command_runs_mapped_binary_with_expanded_args() {
        let argv = container_argv(
            &etcd(),
            &[],
            &s(&["--listen-client-urls=http://$(POD_IP):2379"]),
            &env(),
        )
        .unwrap();
        assert_eq!(
            argv,
            s(&["/opt/e/etcd", "--listen-client-urls=http://127.0.1.3:2379"])
        );
    }

    #[test]
    fn etcd_command_paths_are_substituted() {
        for first in ["/usr/local/bin/etcd", "etcd"] {
            let argv = container_argv(&etcd(), &s(&[first, "--name=m1"]), &[], &env()).unwrap();
            assert_eq!(argv, s(&["/opt/e/etcd", "--name=m1"]));
        }
        let argv = container_argv(&etcd(), &s(&["etcdctl", "get", "k"]), &[], &env()).unwrap();
        assert_eq!(argv[0], "/opt/e/etcdctl");
    }

    #[test]
    fn other_commands_in_etcd_image_run_as_written() {
        let argv = container_argv(
            &etcd(),
            &s(&["/bin/sh", "-ec", "echo $(POD_IP)"]),
            &[],
            &env(),
        )
        .unwrap();
        assert_eq!(argv, s(&["/bin/sh", "-ec", "echo 127.0.1.3"]));
    }

    #[test]
    fn busybox_defaults_to_sh() {
        let argv = container_argv(&Program::HostTools, &[], &s(&["-c", "true"]), &env()).unwrap();
        assert_eq!(argv, s(&["sh", "-c", "true"]));
    }

    #[test]
    fn image_entrypoint_and_cmd_combine_with_command_and_args_as_in_kubernetes() {
        let ep = s(&["/usr/local/bin/etcd-operator"]);
        let cmd = s(&["run"]);
        assert_eq!(
            image_argv(&ep, &cmd, vec![], vec![]),
            s(&["/usr/local/bin/etcd-operator", "run"])
        );
        assert_eq!(
            image_argv(&ep, &cmd, vec![], s(&["crd"])),
            s(&["/usr/local/bin/etcd-operator", "crd"])
        );
        assert_eq!(
            image_argv(&ep, &cmd, s(&["/bin/x"]), vec![]),
            s(&["/bin/x"]),
            "command drops the image's Cmd"
        );
        assert_eq!(
            image_argv(&ep, &cmd, s(&["/bin/x"]), s(&["-v"])),
            s(&["/bin/x", "-v"])
        );
    }

    #[test]
    fn image_program_expands_only_the_pods_command_and_args() {
        let image = crate::imagestore::LocalImage {
            reference: "localhost/op:1".into(),
            digest: "sha256:00".into(),
            rootfs: PathBuf::from("/r"),
            config: crate::imagestore::ImageConfig {
                entrypoint: s(&["/op", "$(POD_IP)"]),
                cmd: s(&["run"]),
                ..Default::default()
            },
        };
        let program = Program::Image(Box::new(image));
        let argv = container_argv(&program, &[], &s(&["--listen=$(POD_IP):8080"]), &env()).unwrap();
        assert_eq!(argv, s(&["/op", "$(POD_IP)", "--listen=127.0.1.3:8080"]));
        assert!(container_argv(&program, &s(&[""]), &[], &env()).is_err());
    }

    #[test]
    fn empty_command_is_an_error() {
        assert!(container_argv(&Program::HostTools, &s(&[""]), &[], &env()).is_err());
    }
}
