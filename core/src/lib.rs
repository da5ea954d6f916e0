//! The etcd-operator's core: everything that decides, and nothing that does I/O. It
//! depends on neither actix nor kube; the actors (`etcd-operator-actors`) run it and the
//! operator crate connects it to Kubernetes and etcd.
//!
//! - [`lifecycle`]: the pure state machine, `decide(state, observation, spec)`, one file
//!   per rule.
//! - [`report`]: status and Events from what a tick decided and did.
//! - [`ports`]: the values the actors send to and get from etcd and Kubernetes.
//! - [`event`], [`outcome`]: an Event to record; how each action of a tick ended.
//! - [`topology`]: where a cluster's members are reached.
//! - [`quantity`]: Kubernetes storage quantities (`1Gi`, `500M`) in bytes, for the
//!   operator and the test rig's resizer.

mod api_error;
pub mod event;
pub mod lifecycle;
pub mod outcome;
pub mod ports;
pub mod quantity;
pub mod report;
pub mod topology;
