//! The etcd-operator actor system and the lifecycle it runs.
//!
//! - [`lifecycle`]: the pure state machine, `decide(state, observation, spec)`.
//! - [`ports`]: the traits through which actors reach Kubernetes and etcd.
//! - [`member_client`], [`cluster`], [`supervisor`]: the actix actors.
//! - [`report`]: the pure report step: status and Events from what a tick decided and did.
//! - [`debug`]: the shared view of every actor's state and the live transition stream.
//! - [`trace`]: the bounded record of each cluster's lifecycle steps and their times.
//!
//! The in-memory fakes of the ports, for actor tests and benchmarks, are test rig: the
//! `etcd-operator-fakes` crate under `testkit/fakes`, never part of this library.

pub mod cluster;
pub mod debug;
mod event;
pub mod lifecycle;
pub mod member_client;
pub mod metrics;
mod outcome;
pub mod ports;
pub mod report;
pub mod supervisor;
pub mod topology;
pub mod trace;
