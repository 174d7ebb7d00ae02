//! Go `time.Duration` text, as `metav1.Duration` fields carry it in v1beta1 (`"10s"`, `"1m30s"`,
//! `"1.5h"`), to and from the whole seconds v1beta2 `...Seconds` fields carry.
//!
//! Parsing follows Go's `time.ParseDuration`: an optional sign, then one or more decimal numbers
//! (with optional fraction) each followed by a unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`); a
//! bare `0` is allowed. Like Go, the total must fit in an `i64` of nanoseconds. Seconds are truncated
//! toward zero, as upstream's conversion does (`1s500ms` is 1 second).
//!
//! Formatting follows Go's `Duration.String()` for whole seconds: `0s`, `45s`, `5m0s`, `1h0m0s`,
//! `-1m30s`. That is what upstream's v1beta1 API writes back, so a v1beta1 value in that canonical
//! form survives a round trip through seconds unchanged.

/// Why a text is not a Go duration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DurationError {
    /// Nothing to parse.
    #[error("the duration is empty")]
    Empty,
    /// A number without a unit after it (other than a bare `0`).
    #[error("a number has no unit")]
    MissingUnit,
    /// A unit Go does not know.
    #[error("unknown unit {0:?}")]
    UnknownUnit(String),
    /// Something other than a number where one was expected.
    #[error("expected a number at {0:?}")]
    ExpectedNumber(String),
    /// More than `i64::MAX` nanoseconds (about 292 years).
    #[error("the duration is too long")]
    Overflow,
}

const NANOS_PER_SECOND: i128 = 1_000_000_000;
/// Go's limit: a Duration is an int64 of nanoseconds.
const MAX_NANOS: i128 = i64::MAX as i128;

/// The nanoseconds in one `unit`.
fn unit_nanos(unit: &str) -> Option<i128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => NANOS_PER_SECOND,
        "m" => 60 * NANOS_PER_SECOND,
        "h" => 3_600 * NANOS_PER_SECOND,
        _ => return None,
    })
}

/// Parses a Go duration into nanoseconds.
pub fn parse_nanos(text: &str) -> Result<i128, DurationError> {
    let (negative, mut rest) = match text.as_bytes().first() {
        None => return Err(DurationError::Empty),
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let integer_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (integer, after) = rest.split_at(integer_len);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(tail) => {
                let len = tail.bytes().take_while(u8::is_ascii_digit).count();
                tail.split_at(len)
            }
            None => ("", after),
        };
        if integer.is_empty() && fraction.is_empty() {
            return Err(DurationError::ExpectedNumber(rest.to_owned()));
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(after.len(), |(i, _)| i);
        let (unit, tail) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit);
        }
        let scale = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit(unit.to_owned()))?;
        total = total
            .checked_add(component_nanos(integer, fraction, scale)?)
            .filter(|t| *t <= MAX_NANOS)
            .ok_or(DurationError::Overflow)?;
        rest = tail;
    }
    Ok(if negative { -total } else { total })
}

/// `integer.fraction` units of `scale` nanoseconds each, truncated to whole nanoseconds.
fn component_nanos(integer: &str, fraction: &str, scale: i128) -> Result<i128, DurationError> {
    let mut whole: i128 = 0;
    for digit in integer.bytes() {
        whole = whole
            .checked_mul(10)
            .and_then(|w| w.checked_add(i128::from(digit - b'0')))
            .filter(|w| *w <= MAX_NANOS)
            .ok_or(DurationError::Overflow)?;
    }
    let mut nanos = whole.checked_mul(scale).ok_or(DurationError::Overflow)?;
    // Digits past the nanosecond cannot change the result; 19 digits keep the arithmetic in range.
    let mut numerator: i128 = 0;
    let mut denominator: i128 = 1;
    for digit in fraction.bytes().take(19) {
        numerator = numerator * 10 + i128::from(digit - b'0');
        denominator *= 10;
    }
    nanos = nanos
        .checked_add(numerator * scale / denominator)
        .ok_or(DurationError::Overflow)?;
    if nanos > MAX_NANOS {
        return Err(DurationError::Overflow);
    }
    Ok(nanos)
}

/// Parses a Go duration into whole seconds, truncated toward zero and capped to the `i32` range
/// that the v1beta2 `...Seconds` fields have.
pub fn parse_seconds(text: &str) -> Result<i64, DurationError> {
    let seconds = parse_nanos(text)? / NANOS_PER_SECOND;
    let capped = seconds.clamp(i128::from(i32::MIN), i128::from(i32::MAX));
    // The clamp above keeps the value well inside i64.
    Ok(i64::try_from(capped).unwrap_or_default())
}

/// Whole seconds as Go's `Duration.String()` writes them.
pub fn format_seconds(seconds: i64) -> String {
    if seconds == 0 {
        return "0s".to_owned();
    }
    let sign = if seconds < 0 { "-" } else { "" };
    let magnitude = seconds.unsigned_abs();
    let (hours, minutes, secs) = (magnitude / 3600, magnitude % 3600 / 60, magnitude % 60);
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{secs}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{secs}s")
    } else {
        format!("{sign}{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_go_parses() {
        for (text, seconds) in [
            ("0", 0),
            ("0s", 0),
            ("10s", 10),
            ("+10s", 10),
            ("-10s", -10),
            ("1m30s", 90),
            ("5m", 300),
            ("1h", 3600),
            ("1.5h", 5400),
            (".5m", 30),
            ("1h2m3s", 3723),
            ("1s500ms", 1),
            ("999ms", 0),
            ("1500000us", 1),
            ("2000000000ns", 2),
            ("1\u{b5}s", 0),
            ("1\u{3bc}s", 0),
            ("3m0.5s", 180),
            ("1000000h", i64::from(i32::MAX)),
            ("-1000000h", i64::from(i32::MIN)),
            ("596523h14m7s", i64::from(i32::MAX)),
        ] {
            assert_eq!(parse_seconds(text), Ok(seconds), "{text}");
        }
    }

    #[test]
    fn refuses_what_go_refuses() {
        assert_eq!(parse_seconds(""), Err(DurationError::Empty));
        assert_eq!(parse_seconds("-"), Err(DurationError::Empty));
        assert_eq!(parse_seconds("10"), Err(DurationError::MissingUnit));
        assert_eq!(parse_seconds("1h10"), Err(DurationError::MissingUnit));
        assert_eq!(
            parse_seconds("10 s"),
            Err(DurationError::UnknownUnit(" s".into()))
        );
        assert_eq!(
            parse_seconds("10d"),
            Err(DurationError::UnknownUnit("d".into()))
        );
        assert_eq!(
            parse_seconds(".s"),
            Err(DurationError::ExpectedNumber(".s".into()))
        );
        assert_eq!(
            parse_seconds("s"),
            Err(DurationError::ExpectedNumber("s".into()))
        );
        assert_eq!(parse_seconds("3000000h"), Err(DurationError::Overflow));
        assert_eq!(
            parse_seconds("99999999999999999999999999999999999999999s"),
            Err(DurationError::Overflow)
        );
    }

    #[test]
    fn formats_like_go() {
        for (seconds, text) in [
            (0, "0s"),
            (45, "45s"),
            (60, "1m0s"),
            (90, "1m30s"),
            (300, "5m0s"),
            (3600, "1h0m0s"),
            (3723, "1h2m3s"),
            (-90, "-1m30s"),
            (i64::MIN, "-2562047788015215h30m8s"),
        ] {
            assert_eq!(format_seconds(seconds), text);
        }
    }

    #[test]
    fn formatted_seconds_parse_back() {
        for seconds in [0, 1, 59, 60, 61, 3599, 3600, 86_400, i64::from(i32::MAX)] {
            assert_eq!(parse_seconds(&format_seconds(seconds)), Ok(seconds));
        }
    }

    #[test]
    fn never_panics_on_odd_text() {
        for text in [
            "\u{0}", "1\u{0}s", "..", "1..s", "-+1s", "1e3s", "١s", "1µ", "💥",
        ] {
            let _ = parse_seconds(text);
        }
    }
}
