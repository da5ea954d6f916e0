//! The etcd-operator actor system: the actors that run the lifecycle of
//! `etcd-operator-core` and reach etcd and Kubernetes through its ports.
//!
//! - [`ports`]: the traits through which actors reach Kubernetes and etcd.
//! - [`roster`]: the watch's relist protocol, once for every kind the operator watches.
//! - [`children`]: one child actor per watched object, kept by that protocol.
//! - [`member_client`], [`cluster`], [`supervisor`]: the actix actors.
//! - [`debug`]: the shared view of every actor's state and the live transition stream.
//! - [`trace`]: the bounded record of each cluster's lifecycle steps and their times.
//!
//! The in-memory fakes of the ports, for actor tests and benchmarks, are test rig: the
//! `etcd-operator-fakes` crate under `testkit/fakes`, never part of this library.

pub mod children;
pub mod cluster;
pub mod debug;
pub mod member_client;
pub mod metrics;
pub mod ports;
pub mod roster;
pub mod supervisor;
pub mod trace;
