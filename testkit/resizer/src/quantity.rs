//! Storage quantities (`1Gi`, `500M`, `1.5Gi`, `2e9`) as whole bytes, to compare a claim's
//! request with a volume's capacity.

/// Why a quantity cannot be read as a size.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not `<number><suffix>` as Kubernetes writes quantities, or negative.
    #[error("quantity {0:?} is not a size (a number and an optional suffix such as Gi)")]
    Malformed(String),
    /// Beyond what this resizer counts.
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
}

/// The factor of a suffix as a fraction `(numerator, denominator)`.
fn suffix_factor(suffix: &str) -> Option<(u128, u128)> {
    let binary = |power: u32| Some((1u128 << (10 * power), 1));
    let decimal = |power: u32| Some((10u128.pow(power), 1));
    match suffix {
        "" => decimal(0),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "m" => Some((1, 1_000)),
        "u" => Some((1, 1_000_000)),
        "n" => Some((1, 1_000_000_000)),
        _ => exponent_factor(suffix),
    }
}

/// `e<N>` or `E<N>`: a power of ten (negative powers as a denominator).
fn exponent_factor(suffix: &str) -> Option<(u128, u128)> {
    let digits = suffix.strip_prefix(['e', 'E'])?;
    let power: i32 = digits.parse().ok()?;
    let scale = 10u128.checked_pow(power.unsigned_abs())?;
    Some(if power >= 0 { (scale, 1) } else { (1, scale) })
}

/// The number of bytes `quantity` stands for, rounded up to a whole byte.
pub fn bytes(quantity: &str) -> Result<u128, QuantityError> {
    let malformed = || QuantityError::Malformed(quantity.to_string());
    let too_large = || QuantityError::TooLarge(quantity.to_string());
    let text = quantity.trim().strip_prefix('+').unwrap_or(quantity.trim());
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(malformed());
    }
    let (num, den) = suffix_factor(suffix).ok_or_else(malformed)?;
    let mantissa: u128 = format!("{whole}{fraction}")
        .parse()
        .map_err(|_| too_large())?;
    let den = 10u128
        .checked_pow(fraction.len() as u32)
        .and_then(|scale| scale.checked_mul(den))
        .ok_or_else(too_large)?;
    let scaled = mantissa.checked_mul(num).ok_or_else(too_large)?;
    Ok(scaled.div_ceil(den))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_decimal_and_exponent_suffixes_are_counted_in_bytes() {
        assert_eq!(bytes("1Gi"), Ok(1 << 30));
        assert_eq!(bytes("2Gi"), Ok(2 << 30));
        assert_eq!(bytes("500Mi"), Ok(500 << 20));
        assert_eq!(bytes("1G"), Ok(1_000_000_000));
        assert_eq!(bytes("2e9"), Ok(2_000_000_000));
        assert_eq!(bytes("1024"), Ok(1024));
        assert_eq!(bytes("1Ei"), Ok(1 << 60));
    }

    #[test]
    fn fractions_are_exact_and_round_up_to_a_byte() {
        assert_eq!(bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(bytes("0.5"), Ok(1));
        assert_eq!(bytes("1500m"), Ok(2));
        assert_eq!(bytes(".5Ki"), Ok(512));
    }

    #[test]
    fn equal_sizes_written_differently_compare_equal() {
        assert_eq!(bytes("1Gi"), bytes("1073741824"));
        assert_eq!(bytes("1024Mi"), bytes("1Gi"));
        assert!(bytes("2Gi").unwrap() > bytes("2G").unwrap());
    }

    #[test]
    fn malformed_and_negative_quantities_are_refused() {
        for bad in ["", "Gi", "1GB", "-1Gi", "1.2.3", "1 Gi", "x"] {
            assert_eq!(
                bytes(bad),
                Err(QuantityError::Malformed(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            bytes("99999999999999999999999999999999999999999"),
            Err(QuantityError::TooLarge(
                "99999999999999999999999999999999999999999".into()
            ))
        );
    }
}
