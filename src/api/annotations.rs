//! Annotations a user sets on an EtcdCluster to ask the operator for something once.

/// Annotation on an EtcdCluster asking for a CA rotation: each new value starts one.
pub const ROTATE_ANNOTATION: &str = "etcd.database.coreos.com/rotate-ca";
