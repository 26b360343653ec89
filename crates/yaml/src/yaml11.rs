//! Plain scalars the way kubectl reads them: sigs.k8s.io/yaml decodes with go-yaml v2,
//! which resolves untagged plain scalars by YAML 1.1 rules (`yes`/`on` are booleans,
//! `0644` is octal), then turns the result into JSON. Quoted and block scalars are
//! always strings. This module is that resolution, and its inverse question for the
//! writer: which strings must be quoted so that any YAML reader gets a string back.

/// What a plain scalar means to kubectl.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    /// Hexadecimal, octal or binary integers beyond 64 bits (go-yaml makes them a
    /// `big.Int`); kept as written, refused by the reader.
    BigInt,
    /// `<<`, the merge key.
    Merge,
    Str,
}

/// Resolves a plain (unquoted, untagged) scalar as go-yaml v2 does (its `resolve.go`).
/// Timestamps resolve to strings: go-yaml v2 hands timestamp-looking values to an
/// `interface{}` target as the original text.
pub fn resolve_plain(text: &str) -> Resolved {
    let Some(&first) = text.as_bytes().first() else {
        return Resolved::Null;
    };
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Resolved::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Resolved::Bool(false);
        }
        "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Resolved::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        "<<" => return Resolved::Merge,
        _ => {}
    }
    match first {
        b'.' => go_parse_float(text).map_or(Resolved::Str, Resolved::Float),
        b'0'..=b'9' | b'+' | b'-' => resolve_number(text),
        _ => Resolved::Str,
    }
}

fn resolve_number(text: &str) -> Resolved {
    if looks_like_go_yaml_timestamp(text) {
        return Resolved::Str;
    }
    // Most numbers have no `_`: no copy for them.
    let plain: std::borrow::Cow<str> = if text.contains('_') {
        text.chars().filter(|&c| c != '_').collect::<String>().into()
    } else {
        text.into()
    };
    match go_parse_int(&plain) {
        Ok(IntValue::Signed(v)) => return Resolved::Int(v),
        Ok(IntValue::Unsigned(v)) => return Resolved::Uint(v),
        Err(IntError::Syntax) => {}
        Err(IntError::Range) => {
            // Decimal big integers still match the float pattern below; the rest would
            // be a big.Int in go-yaml.
            if !is_yaml_style_float(&plain) {
                return Resolved::BigInt;
            }
        }
    }
    if is_yaml_style_float(&plain) {
        // Go's ParseFloat fails (ErrRange) on overflow; go-yaml then keeps the string.
        return match plain.parse::<f64>() {
            Ok(v) if v.is_finite() => Resolved::Float(v),
            _ => Resolved::Str,
        };
    }
    Resolved::Str
}

/// go-yaml v2 tries timestamps first for values starting with four digits and `-`;
/// into an `interface{}` they come out as the original string.
fn looks_like_go_yaml_timestamp(text: &str) -> bool {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits != 4 || text.as_bytes().get(4) != Some(&b'-') {
        return false;
    }
    // The formats go-yaml accepts: date, then optionally `T`/`t`/` ` and a time. Any
    // string it does not parse as a timestamp falls through to numbers, which cannot
    // match `YYYY-...` anyway, so treating every `YYYY-` prefix as text is exact.
    true
}

enum IntValue {
    Signed(i64),
    Unsigned(u64),
}

enum IntError {
    Syntax,
    Range,
}

/// `strconv.ParseInt(s, 0, 64)`, falling back to `ParseUint` as go-yaml does: optional
/// sign, `0x`/`0o`/`0b` prefixes (either case) and a bare leading `0` for octal.
fn go_parse_int(text: &str) -> Result<IntValue, IntError> {
    let (negative, unsigned_text) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let bytes = unsigned_text.as_bytes();
    let (radix, digits) = match bytes {
        [b'0', b'x' | b'X', ..] => (16, &unsigned_text[2..]),
        [b'0', b'o' | b'O', ..] => (8, &unsigned_text[2..]),
        [b'0', b'b' | b'B', ..] => (2, &unsigned_text[2..]),
        [b'0', _, ..] => (8, &unsigned_text[1..]),
        _ => (10, unsigned_text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return Err(IntError::Syntax);
    }
    let magnitude = u64::from_str_radix(digits, radix).map_err(|_| IntError::Range)?;
    if negative {
        // i64::MIN has no positive counterpart in i64.
        if magnitude <= i64::MAX as u64 + 1 {
            return Ok(IntValue::Signed((magnitude as i64).wrapping_neg()));
        }
        return Err(IntError::Range);
    }
    match i64::try_from(magnitude) {
        Ok(v) => Ok(IntValue::Signed(v)),
        // ParseUint takes no sign: `+18446744073709551615` stays a (float) string.
        Err(_) if text.starts_with('+') => Err(IntError::Range),
        Err(_) => Ok(IntValue::Unsigned(magnitude)),
    }
}

/// go-yaml's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_style_float(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'-' | b'+')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// `strconv.ParseFloat` for the values go-yaml hands it unchanged (those starting with
/// `.`): decimal digits, optional exponent, underscores only between digits.
fn go_parse_float(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'_' {
            let between_digits = i > 0 && b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit);
            if !between_digits {
                return None;
            }
        }
    }
    let plain: String = text.chars().filter(|&c| c != '_').collect();
    if !is_yaml_style_float(&plain) {
        return None;
    }
    plain.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 32)`, which sigs.k8s.io/yaml uses to turn a
/// float map key into a JSON object key.
pub fn go_format_float_key(value: f64) -> String {
    if value.is_nan() {
        return String::from(".nan");
    }
    if value.is_infinite() {
        return String::from(if value > 0.0 { ".inf" } else { "-.inf" });
    }
    let narrow = value as f32;
    if narrow == 0.0 {
        return String::from(if narrow.is_sign_negative() { "-0" } else { "0" });
    }
    // Shortest digits of the float32, as `d.ddddde±x`.
    let sci = format!("{narrow:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    // Go's %g at shortest precision switches to %e when exp < -4 || exp >= 6.
    let eprec = 6;
    if exponent < -4 || exponent >= eprec {
        let (head, tail) = digits.split_at(1);
        let tail = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        let esign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{head}{tail}e{esign}{:02}", exponent.abs());
    }
    if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let point = (exponent + 1) as usize;
    if digits.len() <= point {
        format!("{sign}{digits}{}", "0".repeat(point - digits.len()))
    } else {
        format!("{sign}{}.{}", &digits[..point], &digits[point..])
    }
}

/// True when `text` can be written as a plain scalar and every YAML reader, 1.1 or 1.2,
/// reads it back as this same string. Conservative: when in doubt, quote.
pub fn plain_is_safe(text: &str) -> bool {
    let Some(first) = text.chars().next() else {
        return false;
    };
    // This runs for every key and string written; most start with a character that
    // no value other than a string can start with, so resolving them is skipped.
    if may_mean_more_than_text(first) && (resolve_plain(text) != Resolved::Str || means_more_than_text_elsewhere(text))
    {
        return false;
    }
    if first.is_whitespace() || text.ends_with(char::is_whitespace) {
        return false;
    }
    // Indicators that start something else at the beginning of a plain scalar. `-` is
    // fine when followed by a non-space (`--config`), as every YAML reader agrees.
    if matches!(
        first,
        '?' | ':' | ',' | '[' | ']' | '{' | '}' | '#' | '&' | '*' | '!' | '|' | '>' | '\'' | '"' | '%' | '@' | '`'
    ) {
        return false;
    }
    if first == '-' && text[1..].chars().next().is_none_or(char::is_whitespace) {
        return false;
    }
    if text.starts_with("---") || text.starts_with("...") {
        return false;
    }
    if text.ends_with(':') {
        return false;
    }
    // One pass: no `: ` (a key), no ` #` (a comment), nothing that needs escaping. No
    // substring searcher is set up, and ASCII text (most of it) goes byte by byte:
    // there, tab, line feed and every character `needs_escape` are the controls.
    if text.is_ascii() {
        let mut previous = 0;
        for &b in text.as_bytes() {
            if (previous == b':' && b == b' ') || (previous == b' ' && b == b'#') || b < 0x20 || b == 0x7f {
                return false;
            }
            previous = b;
        }
        return true;
    }
    let mut previous = '\0';
    for c in text.chars() {
        if (previous == ':' && c == ' ') || (previous == ' ' && c == '#') || c == '\t' || c == '\n' || needs_escape(c) {
            return false;
        }
        previous = c;
    }
    true
}

/// Whether a plain scalar starting with `first` can resolve to anything but a string
/// (`resolve_plain`) or mean more than text to some reader
/// (`means_more_than_text_elsewhere`): only these first characters can.
fn may_mean_more_than_text(first: char) -> bool {
    matches!(
        first,
        'y' | 'Y' | 'n' | 'N' | 't' | 'T' | 'f' | 'F' | 'o' | 'O' | '~' | '.' | '+' | '-' | '<' | '=' | '0'..='9'
    )
}

/// Strings that go-yaml v2 reads as strings but other readers do not: YAML 1.1
/// sexagesimal numbers (`1:30`), timestamps, YAML 1.2 octal (`0o17`), the 1.1 value
/// key `=`. Quoting them costs nothing and keeps the output unambiguous for any tool.
fn means_more_than_text_elsewhere(text: &str) -> bool {
    if text == "=" {
        return true;
    }
    let first = text.as_bytes()[0];
    if !(first.is_ascii_digit() || first == b'+' || first == b'-' || first == b'.') {
        return false;
    }
    let rest = text.trim_start_matches(['+', '-']);
    // Sexagesimal: digits and `_`, then `:NN` groups, optional fraction.
    let sexagesimal = rest.contains(':')
        && rest
            .split(':')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit() || b == b'_' || b == b'.'));
    sexagesimal || looks_like_go_yaml_timestamp(text)
}

/// Strings a YAML writer must take care with: words YAML 1.1 resolves to another type
/// (`yes`, `No`, `on`, `~`, `null`, `1e3`, `0x1F`, `0644`, `.inf`, `<<`, ...), text that
/// looks like YAML syntax (document markers, indicators, flow collections, comments),
/// leading and trailing white space, line breaks and characters that must be escaped.
/// Written as a string, each must read back as that same string, by kubectl and by
/// [`super::read`]; the writer's property test and the offline corpus test draw from it.
pub const TRICKY_STRINGS: &[&str] = &[
    "yes",
    "No",
    "on",
    "OFF",
    "y",
    "n",
    "Y",
    "~",
    "null",
    "",
    "1e3",
    "0x1F",
    "0644",
    "0o17",
    "1:20",
    ".inf",
    "-.Inf",
    ".nan",
    "<<",
    "=",
    "2024-01-01",
    "2001-12-14t21:59:43.10-05:00",
    "12",
    "-1",
    "+1",
    "1_000",
    "09",
    "1.",
    ".5",
    "---",
    "...",
    "- x",
    "? x",
    "a: b",
    "a #b",
    "#",
    "&a",
    "*a",
    "!t",
    "%",
    "@",
    "|",
    ">",
    "'",
    "\"",
    "  ",
    " x",
    "x ",
    "\n",
    "\n\n",
    "a\nb",
    "a\n",
    " a\nb\n\n",
    "tab\there",
    "é✓",
    "\u{85}",
    "\u{2028}",
    "\u{feff}x",
    "x\r\ny",
    "\u{7}",
    "{a: 1}",
    "[1]",
    "true",
    "False",
    "0b101",
    "1e400",
    "0x",
    "v1.2",
];

/// Characters that cannot appear raw in a YAML scalar (outside double-quoted escapes),
/// or that YAML 1.1 treats as line breaks (NEL, LS, PS).
pub fn needs_escape(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_and_nulls_of_yaml_1_1() {
        for t in ["y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE"] {
            assert_eq!(resolve_plain(t), Resolved::Bool(true), "{t}");
        }
        for t in [
            "n", "N", "no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE",
        ] {
            assert_eq!(resolve_plain(t), Resolved::Bool(false), "{t}");
        }
        for t in ["", "~", "null", "Null", "NULL"] {
            assert_eq!(resolve_plain(t), Resolved::Null, "{t}");
        }
        // Mixed case that is not in go-yaml's table stays a string.
        for t in ["yES", "oN", "NuLL", "tRUE"] {
            assert_eq!(resolve_plain(t), Resolved::Str, "{t}");
        }
    }

    #[test]
    fn integers_octal_hex_binary_signs_and_underscores() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("0644", 420),
            ("0400", 256),
            ("0o17", 15),
            ("0x1F", 31),
            ("0X1f", 31),
            ("0b101", 5),
            ("+12", 12),
            ("-12", -12),
            ("1_000", 1000),
            ("-0x1F", -31),
            ("1_", 1),
            ("-9223372036854775808", i64::MIN),
        ];
        for (text, want) in cases {
            assert_eq!(resolve_plain(text), Resolved::Int(*want), "{text}");
        }
        assert_eq!(resolve_plain("18446744073709551615"), Resolved::Uint(u64::MAX));
        assert_eq!(resolve_plain("0x1FFFFFFFFFFFFFFFFF"), Resolved::BigInt);
    }

    #[test]
    fn floats_including_go_quirks() {
        assert_eq!(resolve_plain("1e3"), Resolved::Float(1000.0));
        assert_eq!(resolve_plain("1.5"), Resolved::Float(1.5));
        assert_eq!(resolve_plain(".5"), Resolved::Float(0.5));
        assert_eq!(resolve_plain("1."), Resolved::Float(1.0));
        assert_eq!(resolve_plain("-1E-2"), Resolved::Float(-0.01));
        // Not octal (8 and 9), so go-yaml falls through to its float pattern.
        assert_eq!(resolve_plain("09"), Resolved::Float(9.0));
        // Bigger than u64, decimal: a float.
        assert_eq!(
            resolve_plain("123456789012345678901234"),
            Resolved::Float(1.2345678901234568e23)
        );
        assert!(matches!(resolve_plain(".nan"), Resolved::Float(v) if v.is_nan()));
        assert_eq!(resolve_plain("-.inf"), Resolved::Float(f64::NEG_INFINITY));
        // Overflow: Go's ParseFloat fails, go-yaml keeps the text.
        assert_eq!(resolve_plain("1e400"), Resolved::Str);
    }

    #[test]
    fn strings_that_look_like_something_else() {
        for t in [
            "2024-01-01",
            "2001-12-14t21:59:43.10-05:00",
            "1.2.3",
            "10.0.0.1",
            "1:20",
            "0x",
            "100m",
            "64Mi",
            "v1",
            ".",
            "-",
            "+",
            "yes please",
            "0o",
            "1e",
            "._5",
        ] {
            assert_eq!(resolve_plain(t), Resolved::Str, "{t}");
        }
        assert_eq!(resolve_plain("<<"), Resolved::Merge);
    }

    #[test]
    fn plain_is_safe_only_when_every_reader_gets_the_string_back() {
        for t in [
            "nginx:1.27",
            "--concurrency",
            "-Xmx1g",
            "100m",
            "a b",
            "http://x/y",
            "é",
            "a:b",
            "v1",
        ] {
            assert!(plain_is_safe(t), "{t}");
        }
        for t in [
            "",
            "yes",
            "on",
            "off",
            "y",
            "n",
            "null",
            "~",
            "1e3",
            "0x1F",
            "0644",
            "12",
            "1.5",
            ".inf",
            "<<",
            "=",
            "1:20",
            "2024-01-01",
            "0o17",
            " lead",
            "trail ",
            "a: b",
            "a #b",
            "end:",
            "- x",
            "-",
            "#x",
            "&a",
            "*a",
            "!t",
            "|",
            ">",
            "'q",
            "\"q",
            "%x",
            "@x",
            "`x",
            "{a}",
            "[a]",
            "?x",
            ":x",
            "---",
            "...",
            "tab\there",
            "line\nbreak",
            "cr\r",
            "nel\u{85}",
            "bom\u{feff}",
        ] {
            assert!(!plain_is_safe(t), "{t:?}");
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4096))]

            /// `plain_is_safe` skips resolving a text whose first character is not one of
            /// `may_mean_more_than_text`: such a text must resolve to a string and mean
            /// nothing more to any reader.
            #[test]
            fn only_the_listed_first_characters_can_mean_more_than_text(text in "[\\PC\t\n]{1,12}|[yYnNtTfFoO~.+<=0-9][a-zA-Z0-9.:_+-]{0,6}") {
                let first = text.chars().next().unwrap();
                if !may_mean_more_than_text(first) {
                    prop_assert_eq!(resolve_plain(&text), Resolved::Str, "{:?}", text);
                    prop_assert!(!means_more_than_text_elsewhere(&text), "{:?}", text);
                }
            }
        }
    }

    #[test]
    fn every_value_and_word_of_yaml_1_1_starts_with_a_listed_character() {
        for text in [
            "y",
            "Yes",
            "NO",
            "true",
            "False",
            "on",
            "OFF",
            "~",
            "null",
            "Null",
            "NULL",
            ".nan",
            ".Inf",
            "+.inf",
            "-.INF",
            "<<",
            "=",
            "0",
            "12",
            "-1",
            "+1",
            "1e3",
            ".5",
            "0x1F",
            "1:20",
            "2024-01-01",
        ] {
            assert!(may_mean_more_than_text(text.chars().next().unwrap()), "{text}");
            assert!(
                resolve_plain(text) != Resolved::Str || means_more_than_text_elsewhere(text),
                "{text}"
            );
        }
    }

    #[test]
    fn float_keys_are_formatted_like_go() {
        assert_eq!(go_format_float_key(1.5), "1.5");
        assert_eq!(go_format_float_key(1000.0), "1000");
        assert_eq!(go_format_float_key(1e6), "1e+06");
        assert_eq!(go_format_float_key(123456.0), "123456");
        assert_eq!(go_format_float_key(0.0001), "0.0001");
        assert_eq!(go_format_float_key(0.00001), "1e-05");
        assert_eq!(go_format_float_key(0.1), "0.1");
        assert_eq!(go_format_float_key(-2.5), "-2.5");
        assert_eq!(go_format_float_key(1234567.0), "1.234567e+06");
    }
}
