//! etcd's own snapshot integrity check, done while the snapshot streams by.
//!
//! etcd's snapshot stream is the bbolt database file followed by the sha256 of that file
//! (32 bytes). The database is a whole number of 512-byte pages, so a complete stream is
//! `512 * n + 32` bytes long, and its last 32 bytes are the sha256 of everything before
//! them: the check `etcdutl snapshot restore` makes. [`SnapshotVerifier`] checks exactly that
//! without holding the stream: it hashes all but a 32-byte tail as bytes arrive, and also
//! the sha256 of every byte (what is stored).

use sha2::{Digest, Sha256};

/// Length of the trailing checksum.
pub const CHECKSUM_LEN: usize = 32;
/// The database is a whole number of these.
const PAGE_ALIGNMENT: u64 = 512;

/// Why a snapshot stream is not a complete etcd snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntegrityError {
    /// The stream ended before anything but a checksum could have come.
    #[error("the snapshot stream is {0} bytes: too short to hold a database and its checksum")]
    TooShort(u64),
    /// The length is not a database plus a checksum: truncated, or padded.
    #[error(
        "the snapshot stream is {0} bytes, not a whole database (512-byte pages) plus its \
         32-byte sha256: truncated or not an etcd snapshot"
    )]
    BadLength(u64),
    /// The trailing sha256 is not the database's.
    #[error(
        "etcd's checksum at the end of the snapshot ({expected}) is not the sha256 of the \
         database before it ({actual}): the snapshot is corrupt"
    )]
    ChecksumMismatch {
        /// What the stream says (hex).
        expected: String,
        /// What its database hashes to (hex).
        actual: String,
    },
}

/// What a verified snapshot stream was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Bytes in the stream (database and checksum): what is stored.
    pub size: u64,
    /// sha256 (hex) of every byte of the stream.
    pub sha256: String,
    /// Bytes of the database alone.
    pub database_size: u64,
}

/// Checks a snapshot stream chunk by chunk.
#[derive(Clone, Default)]
pub struct SnapshotVerifier {
    whole: Sha256,
    database: Sha256,
    tail: Vec<u8>,
    size: u64,
}

impl SnapshotVerifier {
    /// A verifier that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next chunk of the stream.
    pub fn update(&mut self, chunk: &[u8]) {
        self.whole.update(chunk);
        self.size += chunk.len() as u64;
        // Everything but the last CHECKSUM_LEN bytes seen so far belongs to the database.
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > CHECKSUM_LEN {
            let cut = self.tail.len() - CHECKSUM_LEN;
            self.database.update(&self.tail[..cut]);
            self.tail.drain(..cut);
        }
    }

    /// Bytes seen so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The verdict on the whole stream.
    pub fn finish(self) -> Result<Verified, IntegrityError> {
        if self.size <= CHECKSUM_LEN as u64 {
            return Err(IntegrityError::TooShort(self.size));
        }
        if self.size % PAGE_ALIGNMENT != CHECKSUM_LEN as u64 {
            return Err(IntegrityError::BadLength(self.size));
        }
        let actual = self.database.finalize();
        if actual.as_slice() != self.tail.as_slice() {
            return Err(IntegrityError::ChecksumMismatch {
                expected: hex::encode(&self.tail),
                actual: hex::encode(actual),
            });
        }
        Ok(Verified {
            size: self.size,
            sha256: hex::encode(self.whole.finalize()),
            database_size: self.size - CHECKSUM_LEN as u64,
        })
    }
}

/// sha256 (hex) of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream shaped like etcd's: `pages` pages of varied bytes, then their sha256.
    fn snapshot(pages: usize) -> Vec<u8> {
        let mut db: Vec<u8> = (0..pages * 512).map(|i| (i * 7 % 251) as u8).collect();
        let sum = Sha256::digest(&db);
        db.extend_from_slice(&sum);
        db
    }

    fn verify_in_chunks(stream: &[u8], chunk: usize) -> Result<Verified, IntegrityError> {
        let mut v = SnapshotVerifier::new();
        for part in stream.chunks(chunk) {
            v.update(part);
        }
        v.finish()
    }

    #[test]
    fn a_complete_snapshot_passes_in_any_chunking() {
        let stream = snapshot(9);
        for chunk in [1, 31, 32, 33, 512, 4096, stream.len()] {
            let verified = verify_in_chunks(&stream, chunk).unwrap();
            assert_eq!(verified.size, stream.len() as u64);
            assert_eq!(verified.database_size, 9 * 512);
            assert_eq!(verified.sha256, sha256_hex(&stream), "chunk {chunk}");
        }
    }

    #[test]
    fn a_flipped_byte_is_refused() {
        let mut stream = snapshot(4);
        stream[700] ^= 0x01;
        assert!(matches!(
            verify_in_chunks(&stream, 100),
            Err(IntegrityError::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn a_truncated_stream_is_refused() {
        let stream = snapshot(4);
        assert_eq!(
            verify_in_chunks(&stream[..stream.len() - 1], 64),
            Err(IntegrityError::BadLength(stream.len() as u64 - 1))
        );
        // Cut at a page boundary: the checksum is gone, the rest looks like pages.
        assert_eq!(
            verify_in_chunks(&stream[..3 * 512], 64),
            Err(IntegrityError::BadLength(3 * 512))
        );
        assert_eq!(
            verify_in_chunks(&stream[..20], 64),
            Err(IntegrityError::TooShort(20))
        );
    }

    #[test]
    fn a_cut_that_keeps_the_length_shape_fails_the_checksum() {
        // Two pages and the first 32 bytes of the third: length 512n + 32, wrong sum.
        let stream = snapshot(4);
        assert!(matches!(
            verify_in_chunks(&stream[..2 * 512 + 32], 64),
            Err(IntegrityError::ChecksumMismatch { .. })
        ));
    }
}
