//! Support shared by the integration tests.

// Each test binary uses only part of the support code.
#![allow(dead_code)]

pub mod etcd_process;
pub mod loopback_certs;
pub mod peer_probe;
pub mod s3_server;
pub mod tls_etcd;
