//! One pod's life on the node: address, init containers in order, containers, restarts,
//! image changes, readiness and liveness probes, status reports, and on deletion the
//! graceful stop and removal of the pod object.
//!
//! Dependencies run one way: `worker` → `start`, `report`, `teardown` → `probing`,
//! `lifecycle` → `slot`.

mod lifecycle;
#[cfg(test)]
mod lifecycle_tests;
mod probing;
mod report;
mod slot;
mod start;
mod teardown;
mod worker;

pub use worker::PodWorker;
