//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`), parsed and compared as the
//! API server does: k8s-openapi's `Quantity` is only the string, so bounds on one need
//! this. The grammar is apimachinery's (`resource.ParseQuantity`): a signed decimal
//! number, then a binary suffix (`Ki`..`Ei`), a decimal suffix (`n u m k M G T P E`) or a
//! decimal exponent (`e3`, `E-2`). Values are held exactly, in nano-units, the precision
//! Kubernetes keeps (a finer value is rounded up to the next nano-unit, as it is there).
//!
//! No crate was taken for this: the ones on crates.io convert through `f64`, which
//! cannot compare `0.1` and `100m` exactly.

use std::cmp::Ordering;
use std::fmt;

/// A parsed quantity: its value in nano-units, and the text it was written as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    nanos: i128,
    text: String,
}

/// Why a text is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("expected a quantity (a number with an optional suffix such as `m`, `Mi` or `G`), found an empty string")]
    Empty,
    #[error(
        "expected a quantity (a number with an optional suffix: n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or an exponent such as e3), found {found:?}"
    )]
    Syntax { found: String },
    #[error("quantity {found:?} is too large to compare (beyond 10^29)")]
    TooLarge { found: String },
}

impl Quantity {
    /// Parses `text` (surrounding spaces are not allowed, as in Kubernetes).
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError::Empty);
        }
        let syntax = || QuantityError::Syntax {
            found: text.to_string(),
        };
        let bytes = text.as_bytes();
        let (negative, unsigned) = match bytes[0] {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_end = unsigned
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(unsigned.len());
        let (number, suffix) = unsigned.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
            return Err(syntax());
        }
        let (binary_power, decimal_power) = suffix_powers(suffix).ok_or_else(syntax)?;

        // value = digits × 10^(decimal_power − fraction digits) × 2^binary_power, in nanos.
        let too_large = || QuantityError::TooLarge {
            found: text.to_string(),
        };
        let mut digits: i128 = 0;
        for b in whole.bytes().chain(fraction.bytes()) {
            digits = digits
                .checked_mul(10)
                .and_then(|d| d.checked_add(i128::from(b - b'0')))
                .ok_or_else(too_large)?;
        }
        let fraction_digits = i32::try_from(fraction.len()).map_err(|_| too_large())?;
        let scaled = digits
            .checked_mul(1i128.checked_shl(binary_power).ok_or_else(too_large)?)
            .ok_or_else(too_large)?;
        let exponent = decimal_power + 9 - fraction_digits;
        let nanos = if exponent >= 0 {
            let factor = 10i128.checked_pow(exponent.unsigned_abs()).ok_or_else(too_large)?;
            scaled.checked_mul(factor).ok_or_else(too_large)?
        } else {
            match 10i128.checked_pow(exponent.unsigned_abs()) {
                // Kubernetes rounds a value finer than its precision up.
                Some(divisor) => (scaled + divisor - 1) / divisor,
                None => i128::from(scaled > 0),
            }
        };
        const LIMIT: i128 = 100_000_000_000_000_000_000_000_000_000 * 1_000_000_000;
        if nanos > LIMIT {
            return Err(too_large());
        }
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
            text: text.to_string(),
        })
    }

    /// The text it was written as.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// (power of two, power of ten) of a suffix, or `None` when it is not one.
fn suffix_powers(suffix: &str) -> Option<(u32, i32)> {
    let binary = |p| Some((p, 0));
    let decimal = |p| Some((0, p));
    match suffix {
        "" => decimal(0),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        _ => {
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 4 {
                return None;
            }
            decimal(rest.parse().ok()?)
        }
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Quantity) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn equal_values_in_every_notation_compare_equal() {
        for group in [
            &["1", "1000m", "1e0", "0.001k", "1000000000n", "1E0", "+1", "1.0", "1."][..],
            &["100m", "0.1", ".1", "1e-1", "100000u"],
            &["1Ki", "1024"],
            &["1Mi", "1024Ki", "1048576"],
            &["1.5Gi", "1536Mi"],
            &["1G", "1000M", "1e9"],
            &["0", "0m", "0Gi", "-0"],
        ] {
            for a in group {
                for b in group {
                    assert_eq!(q(a).cmp(&q(b)), Ordering::Equal, "{a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn order_is_kubernetes_order() {
        let ascending = [
            "-1", "1n", "1u", "1m", "999m", "1", "1001m", "1k", "1Ki", "1M", "1Mi", "1G", "1Gi",
        ];
        for pair in ascending.windows(2) {
            assert!(q(pair[0]) < q(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        assert!(q("2") > q("1001m"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("1Mi") > q("1M"));
        assert!(q("1Ki") > q("1k"));
        assert!(q("8") > q("2"));
        assert!(q("256Mi") < q("1Gi"));
        assert!(q("64Mi") > q("32Mi"));
        assert!(q("-1") < q("0"));
    }

    #[test]
    fn finer_than_a_nano_unit_rounds_up_as_kubernetes_does() {
        assert_eq!(
            q("0.1n"),
            Quantity {
                nanos: 1,
                text: "0.1n".into()
            }
        );
        assert_eq!(q("1.5n").cmp(&q("2n")), Ordering::Equal);
        assert_eq!(q("1e-12").cmp(&q("1n")), Ordering::Equal);
    }

    #[test]
    fn keeps_the_text_it_was_written_as() {
        assert_eq!(q("1536Mi").to_string(), "1536Mi");
        assert_eq!(q("500m").as_str(), "500m");
    }

    #[test]
    fn refuses_what_kubernetes_refuses_naming_the_text() {
        for bad in [
            "", " 1", "1 ", "abc", "1.2.3", "1mi", "1KB", "m", ".", "1e", "1e+", "--1", "1Gi1", "0x10", "1,5", "½",
        ] {
            let err = Quantity::parse(bad).unwrap_err();
            if !bad.is_empty() {
                assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
            }
        }
        assert_eq!(Quantity::parse("").unwrap_err(), QuantityError::Empty);
    }

    #[test]
    fn absurd_sizes_are_refused_not_wrapped() {
        for big in [
            "1e99",
            "99999999999999999999999999999999999999999",
            "1e30",
            "200000000000Ei",
        ] {
            assert!(
                matches!(Quantity::parse(big), Err(QuantityError::TooLarge { .. })),
                "{big}"
            );
        }
        assert!(Quantity::parse("16Ei").is_ok());
    }
}
