//! The Kubernetes objects an etcd cluster is made of, built from its EtcdCluster.

mod budget;
mod corruption;
mod data_volume;
pub(crate) mod labels;
mod pod;
mod restore;
mod security;
mod service;
mod tls;

pub(crate) use budget::{
    budget_eviction_policy, disruption_budget, every_member_on_claim, eviction_policy,
    min_available,
};
pub(crate) use data_volume::data_on_claim;
pub use pod::etcd_flags;
pub(crate) use pod::{
    ETCD_CONTAINER, image, member_of_claim, member_pod, pvc_name, version_of_image,
};
pub(crate) use service::{client_service, headless_service};
pub(crate) use tls::record_trust;

#[cfg(test)]
mod tests;
