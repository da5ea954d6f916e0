//! Kubernetes storage quantities (`1Gi`, `500M`, `1.5Gi`, `2e9`) as whole bytes, to
//! compare sizes: the storage a cluster asks for, a claim's request, a volume's capacity.
//! The one parser of the operator and of the test rig's resizer.
//!
//! A quantity is `<sign><number><suffix>` as Kubernetes writes it: a number with an
//! optional decimal point, then a binary suffix (`Ki` to `Ei`), a decimal one (`n`, `u`,
//! `m`, `k`, `M`, `G`, `T`, `P`, `E`), an exponent (`e9`, `E-3`) or none. Whitespace
//! around it is ignored; whitespace inside it is not allowed.
//!
//! The arithmetic is exact, on the quantity's decimal digits and never in floating point,
//! so equal sizes written differently (`1Gi`, `1024Mi`, `1073741824`) count the same
//! bytes, and a fraction of a byte rounds up to a whole one.

/// Why a quantity cannot be read as a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not `<number><suffix>` as Kubernetes writes quantities.
    #[error("quantity {0:?} is not a size (a number and an optional suffix such as Gi)")]
    Malformed(String),
    /// Below zero, which no size is.
    #[error("quantity {0:?} is negative, and a size cannot be")]
    Negative(String),
    /// More bytes than are counted here (a `u128`).
    #[error("quantity {0:?} is too large to count in bytes")]
    TooLarge(String),
}

/// The number of bytes `quantity` stands for, rounded up to a whole byte.
///
/// Zero is zero whatever its sign (`-0`); any other negative quantity is
/// [`QuantityError::Negative`].
pub fn bytes(quantity: &str) -> Result<u128, QuantityError> {
    let malformed = || QuantityError::Malformed(quantity.to_string());
    let text = quantity.trim();
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(malformed());
    }
    let scale = scale(suffix).ok_or_else(malformed)?;
    let digits: Vec<u8> = whole
        .bytes()
        .chain(fraction.bytes())
        .map(|b| b - b'0')
        .skip_while(|&d| d == 0)
        .collect();
    if digits.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(QuantityError::Negative(quantity.to_string()));
    }
    let places = i64::try_from(fraction.len()).unwrap_or(i64::MAX);
    let digits = times_power_of_two(&digits, 10 * scale.binary);
    rounded_up(&digits, scale.decimal.saturating_sub(places))
        .ok_or_else(|| QuantityError::TooLarge(quantity.to_string()))
}

/// What a suffix multiplies the number by: `1024^binary × 10^decimal`.
struct Scale {
    /// The power of 1024 (`Ki` is 1, `Ei` is 6).
    binary: u32,
    /// The power of ten (`k` is 3, `m` is -3, `e9` is 9).
    decimal: i64,
}

/// The scale of a suffix; `None` when it is not one.
fn scale(suffix: &str) -> Option<Scale> {
    let binary = |power| {
        Some(Scale {
            binary: power,
            decimal: 0,
        })
    };
    let decimal = |power| {
        Some(Scale {
            binary: 0,
            decimal: power,
        })
    };
    match suffix {
        "" => decimal(0),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        _ => decimal(exponent(suffix)?),
    }
}

/// The power of ten of `e<N>` or `E<N>`, N an integer with an optional sign; `None` when
/// `suffix` is not one. Powers beyond an `i64` saturate (they are too large or round up
/// to a byte either way).
fn exponent(suffix: &str) -> Option<i64> {
    let signed = suffix.strip_prefix(['e', 'E'])?;
    let (negative, digits) = match signed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, signed.strip_prefix('+').unwrap_or(signed)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.bytes().fold(0i64, |n, b| {
        n.saturating_mul(10).saturating_add(i64::from(b - b'0'))
    });
    Some(if negative { -magnitude } else { magnitude })
}

/// `digits` (decimal, most significant first) times `2^power`, as decimal digits;
/// `power` is at most 60.
fn times_power_of_two(digits: &[u8], power: u32) -> Vec<u8> {
    let factor = 1u128 << power;
    let mut reversed = Vec::with_capacity(digits.len() + 19);
    let mut carry = 0u128;
    for &digit in digits.iter().rev() {
        carry += u128::from(digit) * factor;
        reversed.push(last_digit(carry));
        carry /= 10;
    }
    while carry > 0 {
        reversed.push(last_digit(carry));
        carry /= 10;
    }
    reversed.reverse();
    reversed
}

/// The units digit of `n`.
fn last_digit(n: u128) -> u8 {
    u8::try_from(n % 10).expect("a remainder of ten is a digit")
}

/// `digits × 10^exponent` rounded up to a whole number; `None` beyond a `u128`.
fn rounded_up(digits: &[u8], exponent: i64) -> Option<u128> {
    let places = usize::try_from(exponent.min(0).unsigned_abs()).unwrap_or(usize::MAX);
    let (integer, fraction) = digits.split_at(digits.len().saturating_sub(places));
    let mut value = integer
        .iter()
        .try_fold(0u128, |n, &d| n.checked_mul(10)?.checked_add(u128::from(d)))?;
    if exponent > 0 {
        let power = 10u128.checked_pow(u32::try_from(exponent).ok()?)?;
        value = value.checked_mul(power)?;
    }
    value.checked_add(u128::from(fraction.iter().any(|&d| d != 0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_decimal_and_exponent_suffixes_are_counted_in_bytes() {
        assert_eq!(bytes("1Gi"), Ok(1 << 30));
        assert_eq!(bytes("2Gi"), Ok(2 << 30));
        assert_eq!(bytes("512Mi"), Ok(512 << 20));
        assert_eq!(bytes("500Mi"), Ok(500 << 20));
        assert_eq!(bytes("1Ki"), Ok(1024));
        assert_eq!(bytes("1Ti"), Ok(1 << 40));
        assert_eq!(bytes("1Pi"), Ok(1 << 50));
        assert_eq!(bytes("1k"), Ok(1_000));
        assert_eq!(bytes("500M"), Ok(500_000_000));
        assert_eq!(bytes("1G"), Ok(1_000_000_000));
        assert_eq!(bytes("1T"), Ok(1_000_000_000_000));
        assert_eq!(bytes("1P"), Ok(1_000_000_000_000_000));
        assert_eq!(bytes("2e9"), Ok(2_000_000_000));
        assert_eq!(bytes("2E9"), Ok(2_000_000_000));
        assert_eq!(bytes("2e+3"), Ok(2_000));
        assert_eq!(bytes("1.5e3"), Ok(1_500));
        assert_eq!(bytes("1024"), Ok(1024));
        assert_eq!(bytes("1073741824"), Ok(1 << 30));
    }

    /// The product's float parser read `1E` and `1Ei` as exponents with no digits, and
    /// so as no size at all.
    #[test]
    fn exa_suffixes_are_sizes_and_not_exponents() {
        assert_eq!(bytes("1Ei"), Ok(1 << 60));
        assert_eq!(bytes("1E"), Ok(1_000_000_000_000_000_000));
        assert_eq!(bytes("2E3"), Ok(2_000));
    }

    #[test]
    fn fractions_are_exact_and_round_up_to_a_byte() {
        assert_eq!(bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(bytes("0.5"), Ok(1));
        assert_eq!(bytes(".5Ki"), Ok(512));
        assert_eq!(bytes("5."), Ok(5));
        assert_eq!(bytes("1.0000000001"), Ok(2));
        assert_eq!(bytes("0.1Gi"), Ok(107_374_183));
    }

    #[test]
    fn sub_byte_suffixes_and_negative_exponents_round_up_to_a_byte() {
        assert_eq!(bytes("1500m"), Ok(2));
        assert_eq!(bytes("1000m"), Ok(1));
        assert_eq!(bytes("1m"), Ok(1));
        assert_eq!(bytes("2000000u"), Ok(2));
        assert_eq!(bytes("1n"), Ok(1));
        assert_eq!(bytes("1e-3"), Ok(1));
        assert_eq!(bytes("1e-40"), Ok(1));
        assert_eq!(bytes("1e-400"), Ok(1));
        assert_eq!(bytes("1e-99999999999999999999"), Ok(1));
        assert_eq!(
            bytes("0.0000000000000000000000000000000000000000001"),
            Ok(1)
        );
    }

    /// The product's float parser counted a byte too many where the exact answer is whole
    /// (`1.07G` was 1070000001) and lost bytes beyond 2^53.
    #[test]
    fn counts_are_exact_where_floating_point_is_not() {
        assert_eq!(bytes("9007199254740993"), Ok(9_007_199_254_740_993));
        assert_eq!(bytes("1e38"), Ok(10u128.pow(38)));
        assert_eq!(bytes("4.03k"), Ok(4_030));
        assert_eq!(bytes("4.03M"), Ok(4_030_000));
        assert_eq!(bytes("1.07G"), Ok(1_070_000_000));
    }

    #[test]
    fn equal_sizes_written_differently_compare_equal() {
        assert_eq!(bytes("1Gi"), bytes("1073741824"));
        assert_eq!(bytes("1024Mi"), bytes("1Gi"));
        assert_eq!(bytes("1.5Gi"), bytes("1536Mi"));
        assert_eq!(bytes("1G"), bytes("1e9"));
        assert!(bytes("2Gi").unwrap() > bytes("2G").unwrap());
        assert!(bytes("1Gi").unwrap() < bytes("1.1G").unwrap());
    }

    #[test]
    fn a_sign_and_surrounding_whitespace_are_allowed() {
        assert_eq!(bytes("+1Gi"), Ok(1 << 30));
        assert_eq!(bytes(" 1Gi\n"), Ok(1 << 30));
        assert_eq!(bytes("+2e9"), Ok(2_000_000_000));
    }

    #[test]
    fn zero_is_zero_whatever_its_sign_or_suffix() {
        for zero in ["0", "0Gi", "-0", "-0.0Gi", "+0", "0e400", "000"] {
            assert_eq!(bytes(zero), Ok(0), "{zero:?}");
        }
    }

    #[test]
    fn negative_quantities_are_refused_as_negative() {
        for negative in ["-1Gi", "-1", "-2e9", "-0.5"] {
            assert_eq!(
                bytes(negative),
                Err(QuantityError::Negative(negative.into())),
                "{negative:?}"
            );
        }
    }

    #[test]
    fn what_is_not_a_quantity_is_refused_as_malformed() {
        for bad in [
            "", " ", "Gi", "1Gb", "1GB", "ten", "x", "1.2.3", "1 Gi", ".", "+", "-", "+-1", "1e",
            "1e1.5", "1e3Gi", "e9", "1KI", "1K", "inf", "NaN", "1-2", "١",
        ] {
            assert_eq!(
                bytes(bad),
                Err(QuantityError::Malformed(bad.into())),
                "{bad:?}"
            );
        }
    }

    /// The product's float parser saturated these to `u128::MAX`, so two different sizes
    /// compared equal.
    #[test]
    fn sizes_beyond_a_u128_are_refused_as_too_large() {
        for huge in [
            "99999999999999999999999999999999999999999",
            "1e40",
            "1e400",
            "1e99999999999999999999",
            "400000000000000000000Ei",
        ] {
            assert_eq!(
                bytes(huge),
                Err(QuantityError::TooLarge(huge.into())),
                "{huge:?}"
            );
        }
        assert_eq!(
            bytes("340282366920938463463374607431768211455"),
            Ok(u128::MAX)
        );
    }

    #[test]
    fn errors_name_the_quantity() {
        let message = bytes("1GB").unwrap_err().to_string();
        assert!(message.contains("\"1GB\""), "{message}");
        let message = bytes("-1Gi").unwrap_err().to_string();
        assert!(message.contains("negative"), "{message}");
    }
}
