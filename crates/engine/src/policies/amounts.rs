//! Exact amounts in CEL, for the Pod-level sums of `resources`.
//!
//! The API server's CEL adds two quantities exactly (`quantity().add`), but a list of them
//! only through ints (`sum()`; CEL has no fold), and writes no quantity back as text. So
//! an amount is the pair `[units, nanos]`: whole units and the nano-units below them
//! (`0 <= nanos < 10^9`, quantities have no finer precision). A quantity becomes a pair
//! exactly: `int()` of its approximate float is within a few thousand units of it for
//! any value below [`LIMIT`] (a double's error is below 2^-50 of the value), the
//! remainder is taken exactly (`quantity().sub`), and the remainder's float times 10^9 is
//! then a whole number of nano-units off by far less than a half, so rounding gives it
//! exactly. Sums of pairs are exact in ints up to 9.2·10^18 units; [`LIMIT`] keeps every
//! sum below that (checked before any pair is made, on the floats).
//!
//! Every function returns CEL text; arguments are CEL expressions evaluated once each.

/// Nano-units in one unit.
const NANOS: &str = "1000000000";

/// The largest total of amounts of one resource the policies add exactly: the API server
/// refuses no Pod for less, but no int of CEL holds more than 9.2·10^18 units.
pub const LIMIT: &str = "4e18";

/// `[value].map(name, body)[0]`: `value` evaluated once and read as `name` in `body`.
pub fn bind(value: &str, name: &str, body: &str) -> String {
    format!("[{value}].map({name}, {body})[0]")
}

/// The pair of a quantity's text (`""`: none, the pair of zero).
pub fn of_text(text: &str) -> String {
    let normalised = bind(
        "xn >= 0 ? xn / 1000000000 : -((999999999 - xn) / 1000000000)",
        "xc",
        "[xw + xc, xn - xc * 1000000000]",
    );
    let nanos = bind("xr >= 0.0 ? int(xr + 0.5) : -int(0.5 - xr)", "xn", &normalised);
    let remainder = bind("xq.sub(xw).asApproximateFloat() * 1e9", "xr", &nanos);
    let whole = bind("int(xq.asApproximateFloat())", "xw", &remainder);
    let parsed = bind("quantity(xt)", "xq", &whole);
    bind(text, "xt", &format!("xt == \"\" ? [0, 0] : {parsed}"))
}

/// The approximate float of a quantity's text (`""`: 0), for the checks against [`LIMIT`].
pub fn approximate(text: &str) -> String {
    bind(text, "xa", "xa == \"\" ? 0.0 : quantity(xa).asApproximateFloat()")
}

/// The sum of a CEL list of pairs (each normalised: no carry beyond one list's size).
pub fn sum_list(list: &str) -> String {
    bind(
        list,
        "sl",
        &bind(
            "[sl.map(p, p[0]).sum(), sl.map(p, p[1]).sum()]",
            "ss",
            &format!("[ss[0] + ss[1] / {NANOS}, ss[1] % {NANOS}]"),
        ),
    )
}

/// The sum of pairs.
pub fn sum(items: &[String]) -> String {
    match items {
        [] => String::from("[0, 0]"),
        [one] => one.clone(),
        _ => sum_list(&format!("[{}]", items.join(", "))),
    }
}

/// The largest of a CEL list of pairs, which holds one at least.
pub fn max_list(list: &str) -> String {
    bind(
        list,
        "ml",
        &bind(
            "ml.map(p, p[0]).max()",
            "mw",
            "[mw, ml.filter(p, p[0] == mw).map(p, p[1]).max()]",
        ),
    )
}

/// The largest of pairs (one at least).
pub fn max(items: &[String]) -> String {
    match items {
        [one] => one.clone(),
        _ => max_list(&format!("[{}]", items.join(", "))),
    }
}

/// `a - b`, normalised (one borrow: each nanos is below 10^9).
pub fn minus(a: &str, b: &str) -> String {
    bind(
        &format!("[{a}, {b}]"),
        "md",
        &bind(
            "[md[0][0] - md[1][0], md[0][1] - md[1][1]]",
            "mr",
            &format!("mr[1] < 0 ? [mr[0] - 1, mr[1] + {NANOS}] : mr"),
        ),
    )
}

/// The binary suffixes, from the largest, with their factors.
const BINARY: [(&str, u64); 6] = [
    ("Ei", 1 << 60),
    ("Pi", 1 << 50),
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
    ("Ki", 1 << 10),
];

/// The text of a non-negative pair in the format the Pod's own value (`own`, a CEL string
/// as the API server wrote it) decides, as both injection paths write it: after a value
/// with a binary suffix, a whole sum in the largest binary unit that divides it (`1152Mi`),
/// else as an integer; a whole sum as an integer (`2`, `1207959552`); else whole
/// milli-units as `1500m`; else nano-units as `1000000005n`.
pub fn write_like(pair: &str, own: &str) -> String {
    let mut binary = String::new();
    for (suffix, factor) in BINARY {
        binary.push_str(&format!(
            "wp[0] % {factor} == 0 ? string(wp[0] / {factor}) + \"{suffix}\" : "
        ));
    }
    binary.push_str("string(wp[0])");
    let whole = format!("({own}.endsWith(\"i\") && wp[0] != 0 ? ({binary}) : string(wp[0]))");
    let millis =
        "(wp[0] == 0 ? string(wp[1] / 1000000) : string(wp[0]) + string(1000 + wp[1] / 1000000).substring(1)) + \"m\"";
    let nanos = format!("(wp[0] == 0 ? string(wp[1]) : string(wp[0]) + string({NANOS} + wp[1]).substring(1)) + \"n\"");
    bind(
        pair,
        "wp",
        &format!("wp[1] == 0 ? {whole} : wp[1] % 1000000 == 0 ? {millis} : {nanos}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_bound_once_and_read_by_name() {
        assert_eq!(bind("f(x)", "v", "v + v"), "[f(x)].map(v, v + v)[0]");
    }

    #[test]
    fn sums_of_one_or_none_need_no_list() {
        assert_eq!(sum(&[]), "[0, 0]");
        assert_eq!(sum(&[String::from("a")]), "a");
        assert_eq!(max(&[String::from("a")]), "a");
        assert!(sum(&[String::from("a"), String::from("b")]).starts_with("[[a, b]].map(sl, "));
    }

    #[test]
    fn the_text_is_chosen_by_the_pod_s_own_suffix() {
        let text = write_like("p", "own");
        // Binary only after a value with a binary suffix, and only for a whole sum.
        assert!(text.contains("own.endsWith(\"i\") && wp[0] != 0"), "{text}");
        // From the largest binary unit down to Ki, then a plain integer.
        let ei = text.find("\"Ei\"").expect("Ei");
        let ki = text.find("\"Ki\"").expect("Ki");
        assert!(ei < ki, "{text}");
        assert!(text.contains("1152921504606846976"), "{text}");
        // Millis and nanos zero-padded after the whole units.
        assert!(text.contains("string(1000 + wp[1] / 1000000).substring(1)"), "{text}");
        assert!(text.contains("string(1000000000 + wp[1]).substring(1)"), "{text}");
    }
}
