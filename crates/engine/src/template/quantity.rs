//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`), parsed and compared as the
//! API server does: k8s-openapi's `Quantity` is only the string, so bounds on one need
//! this. The grammar is apimachinery's (`resource.ParseQuantity`): a signed decimal
//! number, then a binary suffix (`Ki`..`Ei`), a decimal suffix (`n u m k M G T P E`) or a
//! decimal exponent (`e3`, `E-2`). Values are held exactly, in nano-units, the precision
//! Kubernetes keeps (a finer value is rounded up to the next nano-unit, as it is there),
//! whatever the number of digits; a binary-suffixed one is capped at the largest int64, as
//! there. The compiled admission policies compare with the API server's `quantity()`, so
//! the two paths decide alike.
//!
//! No crate was taken for this: the ones on crates.io convert through `f64`, which
//! cannot compare `0.1` and `100m` exactly.

use std::cmp::Ordering;
use std::fmt;

use num_bigint::BigUint;
use num_traits::Zero;

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
        "expected a quantity (a number with an optional suffix: n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or an exponent such as e3), found {}",
        json_quoted(found)
    )]
    Syntax { found: String },
    #[error("quantity {} is too large to compare (beyond 10^29)", json_quoted(found))]
    TooLarge { found: String },
}

/// The text as a JSON string, as the override's value is quoted in the same message (and
/// as the compiled admission policies can write it: CEL has no Rust `{:?}`).
fn json_quoted(text: &str) -> serde_json::Value {
    serde_json::Value::from(text)
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
        let exponent = i64::from(decimal_power) + 9 - i64::try_from(fraction.len()).unwrap_or(i64::MAX);
        let nanos = match exact_nanos_fast(whole, fraction, binary_power, exponent) {
            Some(nanos) => BigOrSmall::Small(nanos),
            None => exact_nanos_big(whole, fraction, binary_power, exponent),
        };
        // Kubernetes caps a binary-suffixed quantity at the largest int64 (the API server's
        // `quantity()` compares the capped value), and holds any other exactly.
        let nanos = if binary_power > 0 {
            nanos.min(BigOrSmall::Small(i128::from(i64::MAX) * NANOS_PER_UNIT))
        } else {
            nanos
        };
        let nanos = match nanos {
            BigOrSmall::Small(nanos) if nanos <= LIMIT_NANOS => nanos,
            _ => {
                return Err(QuantityError::TooLarge {
                    found: text.to_string(),
                });
            }
        };
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
            text: text.to_string(),
        })
    }

    /// The text it was written as.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The value in nano-units (`1` is 10^9).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// The value rounded up to a whole unit, as apimachinery's `Value()` rounds.
    pub fn ceil_units(&self) -> i128 {
        self.nanos.div_euclid(NANOS_PER_UNIT) + i128::from(self.nanos.rem_euclid(NANOS_PER_UNIT) != 0)
    }

    /// Whether the value is a whole number as the API server asks an extended resource to
    /// be: its value in milli-units, rounded up, is a multiple of 1000.
    pub fn is_whole(&self) -> bool {
        let milli = self.nanos.div_euclid(1_000_000) + i128::from(self.nanos.rem_euclid(1_000_000) != 0);
        milli % 1000 == 0
    }
}

/// An exact amount in nano-units, with the format apimachinery keeps for it: binary
/// (`Ki`..`Ei`) or decimal. Sums follow `resource.Quantity`'s `Add`: the result keeps the
/// first operand's format, or takes the second's when the first is zero; [`Amount::larger`]
/// keeps the first unless the second is larger, as the API server's `maxResourceList`.
/// The format only decides how a value is written ([`Amount::write_like`]): equality and
/// order are the values'.
#[derive(Debug, Clone, Copy)]
pub struct Amount {
    nanos: i128,
    binary: bool,
}

/// The binary suffixes, from the largest: 1024^6 .. 1024^1.
const BINARY_UNITS: [(&str, u32); 6] = [("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];

impl Amount {
    pub const ZERO: Amount = Amount {
        nanos: 0,
        binary: false,
    };

    /// The value in nano-units (`1` is 10^9).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// `self + other`, exact.
    pub fn plus(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos.saturating_add(other.nanos),
            binary: if self.nanos == 0 { other.binary } else { self.binary },
        }
    }

    /// `self - other`, exact, in `self`'s format.
    pub fn minus(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos.saturating_sub(other.nanos),
            binary: self.binary,
        }
    }

    /// The larger; `self` when they are equal (where `Ord::max` takes `other`).
    pub fn larger(self, other: Amount) -> Amount {
        if other.nanos > self.nanos { other } else { self }
    }

    /// Whether the API server writes this value with a binary suffix: in binary format, a
    /// whole number of at least 1024 that 1024 divides (`0.5Ki` it writes `512`, `1.5Gi`
    /// `1536Mi`). A Pod's value read from the API server has a binary suffix exactly then,
    /// so this tells the same of a value read from a manifest before the API server saw it.
    pub fn written_binary(&self) -> bool {
        let units = self.nanos / NANOS_PER_UNIT;
        self.binary && self.nanos % NANOS_PER_UNIT == 0 && units >= 1024 && units % 1024 == 0
    }

    /// This value written in the format `like` decides (a Pod's own value): after one written
    /// with a binary suffix ([`Amount::written_binary`]), in the largest binary unit that
    /// divides it exactly (`1152Mi`), else as a plain integer; otherwise a whole number as an
    /// integer (`2`, `1207959552`), else whole milli-units as `300m`, else nano-units as
    /// `5n`. Both injection paths write values so; the API server re-canonicalises them.
    pub fn write_like(&self, like: &Amount) -> String {
        let nanos = self.nanos;
        if nanos % NANOS_PER_UNIT == 0 {
            let units = nanos / NANOS_PER_UNIT;
            if like.written_binary() && units != 0 {
                for (suffix, power) in BINARY_UNITS {
                    let unit = 1i128 << power;
                    if units % unit == 0 {
                        return format!("{}{suffix}", units / unit);
                    }
                }
            }
            return units.to_string();
        }
        if nanos % 1_000_000 == 0 {
            return format!("{}m", nanos / 1_000_000);
        }
        format!("{nanos}n")
    }
}

impl PartialEq for Amount {
    fn eq(&self, other: &Amount) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Amount {}

impl Ord for Amount {
    fn cmp(&self, other: &Amount) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl PartialOrd for Amount {
    fn partial_cmp(&self, other: &Amount) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Quantity {
    /// The value as an [`Amount`]: binary when written with a binary suffix, as
    /// apimachinery's parser sets the format.
    pub fn amount(&self) -> Amount {
        // Of the suffixes a quantity parses with, only the binary ones end in `i`.
        Amount {
            nanos: self.nanos,
            binary: self.text.ends_with('i'),
        }
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

const NANOS_PER_UNIT: i128 = 1_000_000_000;
/// The largest magnitude compared, 10^29 units: the compiled admission policies refuse
/// beyond it with the same words.
const LIMIT_NANOS: i128 = 100_000_000_000_000_000_000_000_000_000 * NANOS_PER_UNIT;

/// A magnitude in nano-units: in an `i128` when it fits, else too large to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum BigOrSmall {
    Small(i128),
    /// Beyond `i128`: more than any limit, only ever refused.
    Big,
}

/// ⌈digits × 2^binary_power × 10^exponent⌉ (Kubernetes rounds what is finer than a
/// nano-unit up) in `i128` arithmetic, or `None` when an intermediate does not fit.
fn exact_nanos_fast(whole: &str, fraction: &str, binary_power: u32, exponent: i64) -> Option<i128> {
    let mut digits: i128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        digits = digits.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    let scaled = digits.checked_mul(1i128.checked_shl(binary_power)?)?;
    let power = u32::try_from(exponent.unsigned_abs()).ok()?;
    Some(if exponent >= 0 {
        scaled.checked_mul(10i128.checked_pow(power)?)?
    } else {
        match 10i128.checked_pow(power) {
            Some(divisor) => (scaled + divisor - 1) / divisor,
            // 10^power is beyond i128, so is more than `scaled`: a non-zero value is 1n.
            None => i128::from(scaled > 0),
        }
    })
}

/// The same, exactly, for the digits and exponents `i128` cannot hold (as the API server
/// holds any quantity): a value written with 40 digits is still compared. Without a
/// binary suffix only the digits down to the nano-unit are read (the rest only round up),
/// so a long text costs its length, not its square.
fn exact_nanos_big(whole: &str, fraction: &str, binary_power: u32, exponent: i64) -> BigOrSmall {
    let significant = format!("{whole}{fraction}");
    let significant = significant.trim_start_matches('0');
    if significant.is_empty() {
        return BigOrSmall::Small(0);
    }
    let digit_count = i64::try_from(significant.len()).unwrap_or(i64::MAX);
    // value >= 10^(digits - 1 + exponent) nanos: beyond every limit (10^38 nanos) already.
    if digit_count.saturating_add(exponent) > 40 {
        return BigOrSmall::Big;
    }
    if binary_power == 0 && exponent < 0 {
        // At most 40 digits are whole nano-units; a non-zero digit below them rounds up.
        let whole_nanos = usize::try_from(digit_count + exponent).unwrap_or(0);
        let (nanos, below) = significant.split_at(whole_nanos);
        let nanos: i128 = if nanos.is_empty() {
            0
        } else {
            nanos.parse().unwrap_or(i128::MAX)
        };
        let round_up = below.bytes().any(|b| b != b'0');
        return BigOrSmall::Small(nanos.saturating_add(i128::from(round_up)));
    }
    if exponent < 0
        && significant.len() > BINARY_HEAD_DIGITS
        && let Some(nanos) = binary_from_head(significant, binary_power, exponent)
    {
        return nanos;
    }
    exact_nanos_full(significant, binary_power, exponent)
}

/// ⌈N × 2^b × 10^exponent⌉ in big integers, reading every digit of N.
fn exact_nanos_full(significant: &str, binary_power: u32, exponent: i64) -> BigOrSmall {
    let scaled = BigUint::parse_bytes(significant.as_bytes(), 10).unwrap_or_default() << binary_power;
    let nanos = if exponent >= 0 {
        scaled * BigUint::from(10u32).pow(exponent.unsigned_abs() as u32)
    } else {
        let power = exponent.unsigned_abs();
        // digits(scaled) <= bits × log10(2) + 1: below 10^power, a non-zero value is 1n.
        if scaled.bits().saturating_mul(30_103) / 100_000 + 1 < power {
            return BigOrSmall::Small(u8::from(!scaled.is_zero()).into());
        }
        let divisor = BigUint::from(10u32).pow(power as u32);
        (scaled + &divisor - 1u32) / divisor
    };
    into_nanos(nanos)
}

fn into_nanos(nanos: BigUint) -> BigOrSmall {
    nanos.try_into().map_or(BigOrSmall::Big, BigOrSmall::Small)
}

/// Digits of a long binary-suffixed quantity read before the rest is looked at.
const BINARY_HEAD_DIGITS: usize = 80;

/// ⌈N × 2^b × 10^exponent⌉ for a long N (more than [`BINARY_HEAD_DIGITS`] digits) from
/// its first digits H alone, when the rest cannot change it: the value lies between H's
/// and (H + 1)'s (scaled alike), and when both bounds round to one nano-unit, that is it.
/// `None` when they do not (the value sits at a nano-unit's edge): read it all then.
fn binary_from_head(significant: &str, binary_power: u32, exponent: i64) -> Option<BigOrSmall> {
    let (head, tail) = significant.split_at(BINARY_HEAD_DIGITS);
    let rest_digits = i64::try_from(tail.len()).ok()?;
    // value = H × 2^b × 10^(rest + exponent) + below, with rest + exponent < 0 here
    // (the caller has refused values of more than 40 nano digits).
    let shift = rest_digits.checked_add(exponent)?;
    if shift >= 0 {
        return None;
    }
    let power = shift.unsigned_abs();
    // H × 2^b and (H + 1) × 2^b have at most 80 + 19 digits (H > 0, it has no leading
    // zero): below 10^power they are under 1 nano-unit, rounded up to it.
    if power > 100 {
        return Some(BigOrSmall::Small(1));
    }
    let head = BigUint::parse_bytes(head.as_bytes(), 10)? << binary_power;
    let divisor = BigUint::from(10u32).pow(power as u32);
    if tail.bytes().all(|b| b == b'0') {
        return Some(into_nanos((head + &divisor - 1u32) / divisor));
    }
    let low = &head / &divisor + 1u32; // the value is above H's, so at least this
    let high = (&head + (BigUint::from(1u32) << binary_power) + &divisor - 1u32) / &divisor;
    (low == high).then(|| into_nanos(low))
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

    fn a(text: &str) -> Amount {
        q(text).amount()
    }

    #[test]
    fn amounts_add_and_compare_exactly_whatever_their_notation() {
        assert_eq!(a("100m").plus(a("0.2")), a("300m"));
        assert_eq!(a("1Gi").plus(a("128Mi")), a("1152Mi"));
        assert_eq!(a("1").minus(a("250m")), a("750m"));
        assert_eq!(
            a("64Mi").plus(a("100M")).nanos(),
            (67_108_864 + 100_000_000) * 1_000_000_000
        );
        assert!(a("1001m") > a("1"));
        assert_eq!(a("1k").larger(a("1000")), a("1000"));
        assert_eq!(a("2").larger(a("3")), a("3"));
        assert_eq!(Amount::ZERO.plus(a("5n")), a("5n"));
    }

    /// The format a sum keeps is apimachinery's: the first operand's, or the second's when
    /// the first is zero; a maximum keeps the first unless the second is larger. Seen on a
    /// v1.36 API server: Pod-level requests defaulted from container requests `0.5Ki` and
    /// `512` are written `1Ki`; from `0` and `1Mi`, `1Mi`; from `1000` and `24`, `1024`.
    #[test]
    fn a_sum_keeps_the_format_apimachinery_keeps() {
        assert!(a("0.5Ki").plus(a("512")).written_binary());
        assert!(a("0").plus(a("1Mi")).written_binary());
        assert!(!a("1000").plus(a("24")).written_binary());
        assert!(a("1Mi").larger(a("1048576")).written_binary(), "equal: the first stays");
        assert!(!a("1048576").larger(a("1Mi")).written_binary());
        assert!(a("1048576").larger(a("2Mi")).written_binary());
    }

    #[test]
    fn written_binary_is_what_the_api_server_writes_with_a_binary_suffix() {
        for binary in ["1Ki", "1Gi", "1.5Gi", "1024Ki", "2048"] {
            let expected = binary.ends_with('i');
            assert_eq!(a(binary).written_binary(), expected, "{binary}");
        }
        // 512 (below 1024), 1536 (not a multiple of 1024), 1126.4 (not whole).
        for decimal in ["0.5Ki", "1.5Ki", "1.1Ki", "1k", "1e3", "1024"] {
            assert!(!a(decimal).written_binary(), "{decimal}");
        }
    }

    #[test]
    fn values_are_written_in_the_format_the_pod_s_own_value_decides() {
        let cases = [
            // (sum, the Pod's own value, written)
            ("1152Mi", "1Gi", "1152Mi"),
            ("1Gi", "512Mi", "1Gi"),
            ("2Gi", "1Gi", "2Gi"),
            ("1Ki", "1Ki", "1Ki"),
            ("1536", "1Ki", "1536"),
            ("1207959552", "1G", "1207959552"),
            ("1152Mi", "1073741824", "1207959552"),
            ("1152Mi", "0.5Ki", "1207959552"),
            ("300m", "200m", "300m"),
            ("1500m", "500m", "1500m"),
            ("2", "1", "2"),
            ("2000", "1k", "2000"),
            ("0.3", "0.1", "300m"),
            ("1.5", "1e0", "1500m"),
            ("5n", "1", "5n"),
            ("1000001u", "1", "1000001000n"),
            ("0", "1Gi", "0"),
            ("500m", "1Gi", "500m"),
        ];
        for (sum, own, written) in cases {
            assert_eq!(a(sum).write_like(&a(own)), written, "{sum} like {own}");
            // What is written reads back as the same value.
            assert_eq!(a(written), a(sum), "{written}");
        }
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
            "-1e30",
            "100000000000000000000000000000.000000000000000000001",
        ] {
            assert!(
                matches!(Quantity::parse(big), Err(QuantityError::TooLarge { .. })),
                "{big}"
            );
        }
        assert!(Quantity::parse("16Ei").is_ok());
        assert!(Quantity::parse("1e29").is_ok());
    }

    #[test]
    fn more_digits_than_an_i128_holds_are_compared_exactly() {
        // 41 significant digits: just above 1, so 1 nano-unit above it (rounded up).
        let long = "1.0000000000000000000000000000000000000001";
        assert_eq!(q(long).cmp(&q("1000000001n")), Ordering::Equal);
        assert!(q(long) > q("1"));
        assert!(q(long) < q("2"));
        assert_eq!(
            q("0.00000000000000000000000000000000000000000000000001").cmp(&q("1n")),
            Ordering::Equal
        );
        assert_eq!(q(&format!("0.{}", "0".repeat(5000))).cmp(&q("0")), Ordering::Equal);
        assert_eq!(q(&format!("{}1e-5000", "0".repeat(50))).cmp(&q("1n")), Ordering::Equal);
        assert_eq!(
            q("123456789012345678901234567890123456789012345e-30").cmp(&q("123456789012345m")),
            Ordering::Greater
        );
        assert_eq!(
            q("123456789012345678901234567890123456789012345e-30").cmp(&q("123456789012345678901235n")),
            Ordering::Equal
        );
    }

    #[test]
    fn a_long_binary_quantity_read_from_its_head_is_what_all_its_digits_give() {
        // Deterministic digits (xorshift), among them tails of zeros and of nines, which
        // put the value at a nano-unit's edge.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut answered = 0;
        for case in 0..2000 {
            let length = 81 + (next() % 150) as usize;
            let mut digits: String = (0..length).map(|_| char::from(b'0' + (next() % 10) as u8)).collect();
            digits.replace_range(0..1, "7");
            match case % 4 {
                0 => digits.replace_range(90.min(length).., &"0".repeat(length - 90.min(length))),
                1 => digits.replace_range(85.min(length).., &"9".repeat(length - 85.min(length))),
                _ => {}
            }
            let binary_power = [10, 20, 30, 40, 50, 60][(next() % 6) as usize];
            let exponent = -((next() % 260) as i64);
            let full = exact_nanos_full(&digits, binary_power, exponent);
            if let Some(from_head) = binary_from_head(&digits, binary_power, exponent) {
                assert_eq!(from_head, full, "{digits} × 2^{binary_power} × 10^{exponent}");
                answered += 1;
            }
        }
        // Below a nano-unit's edge the head answers: most values are nowhere near one.
        assert!(answered > 1000, "the head answered {answered} of 2000");

        // At an edge: exactly 512 units, and a digit far below it, which rounds up.
        let exact = format!("0.5{}Ki", "0".repeat(100));
        assert_eq!(q(&exact).cmp(&q("512")), Ordering::Equal);
        let above = format!("0.5{}1Ki", "0".repeat(100));
        assert_eq!(q(&above).cmp(&q("512000000001n")), Ordering::Equal);
    }

    #[test]
    fn binary_suffixes_are_capped_at_the_largest_int64_as_kubernetes_does() {
        let max = q("9223372036854775807");
        for capped in [
            "8Ei",
            "200000000000Ei",
            "99999999999999999999999999999999999999999999Ki",
        ] {
            assert_eq!(q(capped).cmp(&max), Ordering::Equal, "{capped}");
        }
        assert_eq!(q("-8Ei").cmp(&q("-9223372036854775807")), Ordering::Equal);
        assert!(q("7Ei") < max);
        // A decimal suffix is held exactly, up to the compared limit.
        assert!(q("10E") > max);
    }
}
