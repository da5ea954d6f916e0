//! Where an operator-managed cluster's CA comes from, and when operator-made certificates
//! are renewed: the two inputs both the verdict and the CA rotation read.

use super::error::SecretProblem;
use super::validate::CheckedCa;

/// Where the CAs of an operator-managed cluster come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    /// The operator makes them (no `caSecret`).
    Operator,
    /// The user's CA Secret (`caSecret`), as checked.
    User(Result<CheckedCa, Vec<SecretProblem>>),
}

/// When operator-made certificates are renewed: `percent` of their lifetime (default
/// two thirds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Renewal {
    /// Percent of the lifetime, 1 to 99; `None`: two thirds.
    pub percent: Option<i32>,
}

impl Renewal {
    /// When a certificate valid from `not_before` to `not_after` is renewed.
    pub fn at(self, not_before: i64, not_after: i64) -> i64 {
        let life = i128::from(not_after - not_before);
        let part = match self.percent {
            Some(p) => life * i128::from(p.clamp(1, 99)) / 100,
            None => life * 2 / 3,
        };
        not_before + i64::try_from(part).unwrap_or(0)
    }
}
