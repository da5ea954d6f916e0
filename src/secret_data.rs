//! A Secret's data as the operator reads it: each key with its bytes. TLS material, store
//! credentials and the snapshot fetch all read their Secrets into this one type.

use std::collections::BTreeMap;

/// The keys of a Secret and their values.
pub type SecretData = BTreeMap<String, Vec<u8>>;
