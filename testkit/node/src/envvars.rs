//! A container's environment: `envFrom`, then `env` (values `$(VAR)`-expanded against the
//! variables defined before them), with the downward API's `fieldRef` and ConfigMap/Secret
//! key references resolved from data fetched beforehand.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::expand::expand_with;

/// What the downward API can tell a container about its pod.
#[derive(Clone, Debug, Default)]
pub struct PodFacts {
    /// `metadata.name`
    pub name: String,
    /// `metadata.namespace`
    pub namespace: String,
    /// `metadata.uid`
    pub uid: String,
    /// `spec.nodeName`
    pub node_name: String,
    /// `spec.serviceAccountName`
    pub service_account: String,
    /// `status.podIP`
    pub pod_ip: String,
    /// `status.hostIP`
    pub host_ip: String,
    /// `metadata.labels`
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`
    pub annotations: BTreeMap<String, String>,
}

impl PodFacts {
    /// Collects the facts of `pod`, whose address is `pod_ip` on a host at `host_ip`.
    pub fn of(pod: &Pod, pod_ip: &str, host_ip: &str) -> PodFacts {
        let spec = pod.spec.as_ref();
        PodFacts {
            name: pod.metadata.name.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node_name: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
            service_account: spec
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_else(|| "default".to_string()),
            pod_ip: pod_ip.to_string(),
            host_ip: host_ip.to_string(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            annotations: pod.metadata.annotations.clone().unwrap_or_default(),
        }
    }

    /// The value of a `fieldRef.fieldPath`.
    pub fn field(&self, path: &str) -> Result<String, String> {
        let keyed = |prefix: &str, map: &BTreeMap<String, String>| -> Option<String> {
            let key = path
                .strip_prefix(prefix)?
                .strip_suffix("']")?
                .strip_prefix("['")?;
            Some(map.get(key).cloned().unwrap_or_default())
        };
        match path {
            "metadata.name" => Ok(self.name.clone()),
            "metadata.namespace" => Ok(self.namespace.clone()),
            "metadata.uid" => Ok(self.uid.clone()),
            "spec.nodeName" => Ok(self.node_name.clone()),
            "spec.serviceAccountName" => Ok(self.service_account.clone()),
            "status.podIP" | "status.podIPs" => Ok(self.pod_ip.clone()),
            "status.hostIP" | "status.hostIPs" => Ok(self.host_ip.clone()),
            _ => keyed("metadata.labels", &self.labels)
                .or_else(|| keyed("metadata.annotations", &self.annotations))
                .ok_or_else(|| format!("unsupported fieldRef fieldPath {path:?}")),
        }
    }
}

/// Key/value data of the ConfigMaps and Secrets a container refers to; a name absent from
/// a map means the object does not exist.
#[derive(Clone, Debug, Default)]
pub struct RefData {
    /// ConfigMap name to its data.
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    /// Secret name to its (decoded) data.
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
}

/// The ConfigMaps and Secrets (by name) a container's environment refers to.
pub fn referenced_objects(container: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut config_maps = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for from in container.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            config_maps.insert(r.name.clone());
        }
        if let Some(r) = &from.secret_ref {
            secrets.insert(r.name.clone());
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(source) = &var.value_from {
            if let Some(r) = &source.config_map_key_ref {
                config_maps.insert(r.name.clone());
            }
            if let Some(r) = &source.secret_key_ref {
                secrets.insert(r.name.clone());
            }
        }
    }
    (config_maps, secrets)
}

/// Builds the environment: `base` first, then `envFrom`, then `env`; a later definition
/// of a name overrides an earlier one.
pub fn build_env(
    container: &Container,
    facts: &PodFacts,
    data: &RefData,
    base: &[(String, String)],
) -> Result<Vec<(String, String)>, String> {
    let mut vars: Vec<(String, String)> = base.to_vec();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (kind, name, optional, map) = if let Some(r) = &from.config_map_ref {
            (
                "configmap",
                &r.name,
                r.optional,
                data.config_maps.get(&r.name),
            )
        } else if let Some(r) = &from.secret_ref {
            ("secret", &r.name, r.optional, data.secrets.get(&r.name))
        } else {
            continue;
        };
        match map {
            Some(map) => {
                for (k, v) in map {
                    set(&mut vars, format!("{prefix}{k}"), v.clone());
                }
            }
            None if optional == Some(true) => {}
            None => return Err(format!("{kind} {name:?} not found")),
        }
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => Some(expand_with(value, &vars)),
            (None, Some(source)) => {
                if let Some(field) = &source.field_ref {
                    Some(facts.field(&field.field_path)?)
                } else if let Some(r) = &source.config_map_key_ref {
                    lookup(
                        "configmap",
                        &data.config_maps,
                        &r.name,
                        &r.key,
                        r.optional == Some(true),
                    )?
                } else if let Some(r) = &source.secret_key_ref {
                    lookup(
                        "secret",
                        &data.secrets,
                        &r.name,
                        &r.key,
                        r.optional == Some(true),
                    )?
                } else {
                    return Err(format!(
                        "env {:?}: only fieldRef, configMapKeyRef and secretKeyRef are supported",
                        var.name
                    ));
                }
            }
            (None, None) => Some(String::new()),
        };
        if let Some(value) = value {
            set(&mut vars, var.name.clone(), value);
        }
    }
    Ok(vars)
}

/// The variables a kubelet gives every container for the `kubernetes` Service, pointing
/// at `host:port`: its ClusterIP and port (10.96.0.1:443 here, which kube-proxy routes to
/// the API server).
pub fn kubernetes_service_env(host: &str, port: u16) -> Vec<(String, String)> {
    let url = format!("tcp://{host}:{port}");
    let prefix = format!("KUBERNETES_PORT_{port}_TCP");
    [
        ("KUBERNETES_SERVICE_HOST".to_string(), host.to_string()),
        ("KUBERNETES_SERVICE_PORT".to_string(), port.to_string()),
        (
            "KUBERNETES_SERVICE_PORT_HTTPS".to_string(),
            port.to_string(),
        ),
        ("KUBERNETES_PORT".to_string(), url.clone()),
        (prefix.clone(), url),
        (format!("{prefix}_PROTO"), "tcp".to_string()),
        (format!("{prefix}_PORT"), port.to_string()),
        (format!("{prefix}_ADDR"), host.to_string()),
    ]
    .into()
}

/// An image's `Env` (`NAME=value` entries) as pairs; entries without `=` are dropped.
pub fn image_env(entries: &[String]) -> Vec<(String, String)> {
    entries
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn lookup(
    kind: &str,
    objects: &BTreeMap<String, BTreeMap<String, String>>,
    name: &str,
    key: &str,
    optional: bool,
) -> Result<Option<String>, String> {
    match objects.get(name).and_then(|m| m.get(key)) {
        Some(v) => Ok(Some(v.clone())),
        None if optional => Ok(None),
        None => Err(format!("{kind} {name:?} has no key {key:?}")),
    }
}

fn set(vars: &mut Vec<(String, String)>, name: String, value: String) {
    vars.retain(|(k, _)| *k != name);
    vars.push((name, value));
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMapKeySelector, EnvVar, EnvVarSource};
    use k8s_openapi::api::core::v1::{ObjectFieldSelector, PodSpec};

    fn facts() -> PodFacts {
        let mut pod = Pod::default();
        pod.metadata.name = Some("m1".into());
        pod.metadata.namespace = Some("ns1".into());
        pod.metadata.labels = Some([("app".to_string(), "etcd".to_string())].into());
        pod.spec = Some(PodSpec {
            node_name: Some("local-node".into()),
            ..Default::default()
        });
        PodFacts::of(&pod, "127.0.1.9", "127.0.0.1")
    }

    fn field(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    api_version: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn plain(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        }
    }

    fn get<'a>(vars: &'a [(String, String)], name: &str) -> Option<&'a str> {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn downward_api_fields_resolve() {
        let c = Container {
            env: Some(vec![
                field("POD_NAME", "metadata.name"),
                field("POD_NAMESPACE", "metadata.namespace"),
                field("POD_IP", "status.podIP"),
                field("NODE", "spec.nodeName"),
                field("APP", "metadata.labels['app']"),
            ]),
            ..Default::default()
        };
        let vars = build_env(&c, &facts(), &RefData::default(), &[]).unwrap();
        assert_eq!(get(&vars, "POD_NAME"), Some("m1"));
        assert_eq!(get(&vars, "POD_NAMESPACE"), Some("ns1"));
        assert_eq!(get(&vars, "POD_IP"), Some("127.0.1.9"));
        assert_eq!(get(&vars, "NODE"), Some("local-node"));
        assert_eq!(get(&vars, "APP"), Some("etcd"));
    }

    #[test]
    fn values_expand_earlier_variables_only() {
        let c = Container {
            env: Some(vec![
                plain("A", "before-$(POD_IP)"),
                field("POD_IP", "status.podIP"),
                plain("URL", "http://$(POD_IP):2379"),
            ]),
            ..Default::default()
        };
        let vars = build_env(&c, &facts(), &RefData::default(), &[]).unwrap();
        assert_eq!(get(&vars, "A"), Some("before-$(POD_IP)"));
        assert_eq!(get(&vars, "URL"), Some("http://127.0.1.9:2379"));
    }

    #[test]
    fn container_env_overrides_base() {
        let c = Container {
            env: Some(vec![plain("PATH", "/x")]),
            ..Default::default()
        };
        let vars = build_env(
            &c,
            &facts(),
            &RefData::default(),
            &[("PATH".into(), "/y".into())],
        )
        .unwrap();
        assert_eq!(vars, vec![("PATH".to_string(), "/x".to_string())]);
    }

    #[test]
    fn kubernetes_service_variables_point_at_the_given_address() {
        let vars = kubernetes_service_env("10.96.0.1", 443);
        assert_eq!(get(&vars, "KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
        assert_eq!(get(&vars, "KUBERNETES_SERVICE_PORT"), Some("443"));
        assert_eq!(get(&vars, "KUBERNETES_PORT"), Some("tcp://10.96.0.1:443"));
        assert_eq!(
            get(&vars, "KUBERNETES_PORT_443_TCP_ADDR"),
            Some("10.96.0.1")
        );
    }

    #[test]
    fn image_env_entries_split_at_the_first_equals_sign() {
        let vars = image_env(&["PATH=/usr/bin".into(), "A=b=c".into(), "BROKEN".into()]);
        assert_eq!(
            vars,
            vec![
                ("PATH".to_string(), "/usr/bin".to_string()),
                ("A".to_string(), "b=c".to_string())
            ]
        );
    }

    #[test]
    fn unsupported_field_is_a_config_error() {
        let c = Container {
            env: Some(vec![field("X", "spec.nope")]),
            ..Default::default()
        };
        let err = build_env(&c, &facts(), &RefData::default(), &[]).unwrap_err();
        assert!(err.contains("spec.nope"), "{err}");
    }

    #[test]
    fn config_map_key_ref_resolves_or_fails_unless_optional() {
        let var = |optional| EnvVar {
            name: "K".into(),
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: "cm".into(),
                    key: "k".into(),
                    optional,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let c = Container {
            env: Some(vec![var(None)]),
            ..Default::default()
        };
        assert!(build_env(&c, &facts(), &RefData::default(), &[]).is_err());
        let mut data = RefData::default();
        data.config_maps
            .insert("cm".into(), [("k".to_string(), "v".to_string())].into());
        let vars = build_env(&c, &facts(), &data, &[]).unwrap();
        assert_eq!(get(&vars, "K"), Some("v"));
        let c = Container {
            env: Some(vec![var(Some(true))]),
            ..Default::default()
        };
        let vars = build_env(&c, &facts(), &RefData::default(), &[]).unwrap();
        assert_eq!(get(&vars, "K"), None);
    }
}
