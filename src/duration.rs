//! Parses Go `time.Duration` strings: the API server's `?timeout=` query and this CLI's duration flags.

use std::time::Duration;

/// `10s`, `1m0s`, `1.5s`, `300ms`, `2h45m`, `0`. `None` for anything else (negative
/// durations included: a timeout cannot be negative).
pub fn parse(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds_per_unit = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * seconds_per_unit;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_api_server_sends() {
        assert_eq!(parse("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse("1m0s"), Some(Duration::from_secs(60)));
        assert_eq!(parse("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse("2h45m"), Some(Duration::from_secs(2 * 3600 + 45 * 60)));
        assert_eq!(parse("0"), Some(Duration::ZERO));
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for bad in ["", "10", "s", "-5s", "10x", "1..5s", ".s", "ten seconds", "1e3s"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
