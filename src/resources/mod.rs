//! The Kubernetes objects an etcd cluster is made of, built from its EtcdCluster.

pub mod labels;
mod pod;
mod service;

pub use pod::{ETCD_CONTAINER, etcd_flags, image, member_pod, pvc_name, version_of_image};
pub use service::{client_service, headless_service};

#[cfg(test)]
mod tests;
