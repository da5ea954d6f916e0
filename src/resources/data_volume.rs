//! Where a member keeps its data: the volume's name in the pod, its mount and etcd's data
//! directory, shared by the member pod and the restore containers.

/// Name of the member's data volume in its pod.
pub(crate) const DATA_VOLUME: &str = "etcd-data";
/// Where the member's data volume is mounted.
pub(crate) const DATA_MOUNT: &str = "/var/etcd";
/// etcd's data directory inside the volume.
pub(crate) const DATA_DIR: &str = "/var/etcd/data";
