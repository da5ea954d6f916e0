//! Kubernetes resource quantities (`1Gi`, `500M`, `1.5Gi`, `2e9`) in bytes, for comparing
//! storage requests.

/// The multiplier of a quantity's suffix.
fn multiplier(suffix: &str) -> Option<f64> {
    const KI: f64 = 1024.0;
    Some(match suffix {
        "" => 1.0,
        "Ki" => KI,
        "Mi" => KI.powi(2),
        "Gi" => KI.powi(3),
        "Ti" => KI.powi(4),
        "Pi" => KI.powi(5),
        "Ei" => KI.powi(6),
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        _ => return None,
    })
}

/// The bytes a quantity stands for, rounded up; `None` when it is not a quantity.
pub(crate) fn bytes(quantity: &str) -> Option<u128> {
    let q = quantity.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let value: f64 = match suffix.strip_prefix(['e', 'E']) {
        Some(exponent) => format!("{number}e{exponent}").parse().ok()?,
        None => number.parse::<f64>().ok()? * multiplier(suffix)?,
    };
    (value.is_finite() && value >= 0.0).then(|| value.ceil() as u128)
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn quantities_in_binary_decimal_and_exponent_forms_are_read_in_bytes() {
        assert_eq!(bytes("1Gi"), Some(1 << 30));
        assert_eq!(bytes("2Gi"), Some(2 << 30));
        assert_eq!(bytes("1.5Gi"), Some(3 << 29));
        assert_eq!(bytes("512Mi"), Some(512 << 20));
        assert_eq!(bytes("500M"), Some(500_000_000));
        assert_eq!(bytes("2e9"), Some(2_000_000_000));
        assert_eq!(bytes("1073741824"), Some(1 << 30));
        assert!(bytes("1Gi") < bytes("1.1G"));
    }

    #[test]
    fn what_is_not_a_quantity_has_no_size() {
        for q in ["", "Gi", "1Gb", "ten", "-1Gi"] {
            assert_eq!(bytes(q), None, "{q:?}");
        }
    }
}
