//! Recovery from a permanent loss of quorum: every case of the decision.
