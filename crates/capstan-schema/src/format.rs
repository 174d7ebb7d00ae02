//! Checks for the `format` keyword.
//!
//! Covered: `int32`/`int64` (integer ranges; stricter than the API server, which ignores them, but
//! a value out of range cannot be decoded by the Go controllers that read it), `byte` (standard
//! base64), `date-time`/`datetime` (RFC 3339), `date`, `ipv4`, `ipv6`, `cidr`, `mac`, `uuid`
//! (and `uuid3`/`uuid4`/`uuid5`). Every other format is accepted unchecked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::{Number, Value};

/// Whether a value satisfies a format: `Some(false)` for a violation, `None` when the format is
/// not checked or does not apply to this JSON type.
pub fn check(format: &str, value: &Value) -> Option<bool> {
    match value {
        Value::String(s) => check_string(format, s),
        Value::Number(n) => check_number(format, n),
        _ => None,
    }
}

fn check_number(format: &str, n: &Number) -> Option<bool> {
    let in_range = |min: i64, max: i64| match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => min <= i && i <= max,
        (None, Some(_)) => false,
        // Floats are a type question for `integer`, not a range question.
        (None, None) => true,
    };
    match format {
        "int32" => Some(in_range(i64::from(i32::MIN), i64::from(i32::MAX))),
        "int64" => Some(in_range(i64::MIN, i64::MAX)),
        _ => None,
    }
}

fn check_string(format: &str, s: &str) -> Option<bool> {
    Some(match format {
        "byte" => is_base64(s),
        "date-time" | "datetime" => is_date_time(s),
        "date" => is_date(s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "uuid" => is_uuid(s, None),
        "uuid3" => is_uuid(s, Some(b'3')),
        "uuid4" => is_uuid(s, Some(b'4')),
        "uuid5" => is_uuid(s, Some(b'5')),
        _ => return None,
    })
}

/// Standard base64 with padding, as Kubernetes' `byte` format expects.
fn is_base64(s: &str) -> bool {
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return false;
    }
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    padding <= 2
        && bytes[..bytes.len() - padding]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn is_date(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let [year, month, day] = parts.as_slice() else {
        return false;
    };
    if year.len() != 4 || month.len() != 2 || day.len() != 2 {
        return false;
    }
    let (Some(year), Some(month), Some(day)) = (digits(year), digits(month), digits(day)) else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days_in_month).contains(&day)
}

/// RFC 3339 date-time; a space instead of `T` and an offset without a colon are accepted as
/// Kubernetes' own parser accepts them.
fn is_date_time(s: &str) -> bool {
    let Some(split) = s.find(['T', 't', ' ']) else {
        return false;
    };
    let (date, time) = (&s[..split], &s[split + 1..]);
    if !is_date(date) {
        return false;
    }
    let (clock, offset) = match time.find(['Z', 'z', '+', '-']) {
        Some(i) => (&time[..i], &time[i..]),
        None => return false,
    };
    let offset_ok = match offset {
        "Z" | "z" => true,
        _ => {
            let hhmm = offset[1..].replace(':', "");
            hhmm.len() == 4
                && hhmm.bytes().all(|b| b.is_ascii_digit())
                && digits(&hhmm[..2]).is_some_and(|h| h <= 23)
                && digits(&hhmm[2..]).is_some_and(|m| m <= 59)
        }
    };
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, fraction)) => (hms, Some(fraction)),
        None => (clock, None),
    };
    let fields: Vec<&str> = hms.split(':').collect();
    let clock_ok = match fields.as_slice() {
        [h, m, sec] => {
            h.len() == 2
                && m.len() == 2
                && sec.len() == 2
                && digits(h).is_some_and(|h| h <= 23)
                && digits(m).is_some_and(|m| m <= 59)
                && digits(sec).is_some_and(|s| s <= 60)
        }
        _ => false,
    };
    let fraction_ok =
        fraction.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()));
    offset_ok && clock_ok && fraction_ok
}

fn is_cidr(s: &str) -> bool {
    let Some((address, prefix)) = s.split_once('/') else {
        return false;
    };
    let Some(prefix) = digits(prefix) else {
        return false;
    };
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => prefix <= 32,
        Ok(IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

/// MAC-48, EUI-64 and 20-octet InfiniBand addresses, colon-, dash- or dot-separated, as Go's
/// `net.ParseMAC` accepts them.
fn is_mac(s: &str) -> bool {
    let hex = |group: &str, width: usize| {
        group.len() == width && group.bytes().all(|b| b.is_ascii_hexdigit())
    };
    for separator in [':', '-'] {
        let groups: Vec<&str> = s.split(separator).collect();
        if matches!(groups.len(), 6 | 8 | 20) && groups.iter().all(|g| hex(g, 2)) {
            return true;
        }
    }
    let groups: Vec<&str> = s.split('.').collect();
    matches!(groups.len(), 3 | 4 | 10) && groups.iter().all(|g| hex(g, 4))
}

fn is_uuid(s: &str, version: Option<u8>) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    let shape_ok = groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, width)| g.len() == width && g.bytes().all(|b| b.is_ascii_hexdigit()));
    shape_ok && version.is_none_or(|v| groups.get(2).and_then(|g| g.bytes().next()) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integer_ranges() {
        assert_eq!(check("int32", &json!(2_147_483_647)), Some(true));
        assert_eq!(check("int32", &json!(2_147_483_648_i64)), Some(false));
        assert_eq!(check("int32", &json!(-2_147_483_649_i64)), Some(false));
        assert_eq!(check("int64", &json!(u64::MAX)), Some(false));
        assert_eq!(check("int64", &json!(i64::MIN)), Some(true));
        assert_eq!(check("double", &json!(1.5)), None);
    }

    #[test]
    fn base64() {
        for ok in ["", "YQ==", "YWI=", "YWJj", "SGVsbG8sIHdvcmxkIQ=="] {
            assert_eq!(check("byte", &json!(ok)), Some(true), "{ok}");
        }
        for bad in ["YQ", "Y===", "YW Jj", "YWJj!", "=YWJ"] {
            assert_eq!(check("byte", &json!(bad)), Some(false), "{bad}");
        }
    }

    #[test]
    fn dates_and_times() {
        for ok in [
            "2024-02-29T12:00:00Z",
            "2023-01-01T00:00:00.123456789+02:00",
            "2023-01-01 23:59:60-0700",
        ] {
            assert_eq!(check("date-time", &json!(ok)), Some(true), "{ok}");
        }
        for bad in [
            "2023-02-29T12:00:00Z",
            "2023-01-01",
            "2023-01-01T24:00:00Z",
            "2023-01-01T12:00:00",
            "2023-13-01T12:00:00Z",
            "yesterday",
            "2023-01-01T12:00:00.Z",
        ] {
            assert_eq!(check("date-time", &json!(bad)), Some(false), "{bad}");
        }
        assert_eq!(check("date", &json!("2024-12-31")), Some(true));
        assert_eq!(check("date", &json!("2024-12-32")), Some(false));
    }

    #[test]
    fn network_formats() {
        assert_eq!(check("ipv4", &json!("192.168.1.10")), Some(true));
        assert_eq!(check("ipv4", &json!("192.168.1.300")), Some(false));
        assert_eq!(check("ipv6", &json!("fd00::1")), Some(true));
        assert_eq!(check("ipv6", &json!("192.168.1.1")), Some(false));
        assert_eq!(check("cidr", &json!("10.0.0.0/8")), Some(true));
        assert_eq!(check("cidr", &json!("fd00::/129")), Some(false));
        assert_eq!(check("cidr", &json!("10.0.0.0")), Some(false));
        assert_eq!(check("mac", &json!("00:1a:2B:3c:4d:5e")), Some(true));
        assert_eq!(check("mac", &json!("001a.2b3c.4d5e")), Some(true));
        assert_eq!(check("mac", &json!("00:1a:2b:3c:4d")), Some(false));
    }

    #[test]
    fn uuids_and_unknown_formats() {
        let v4 = "123e4567-e89b-42d3-a456-426614174000";
        assert_eq!(check("uuid", &json!(v4)), Some(true));
        assert_eq!(check("uuid4", &json!(v4)), Some(true));
        assert_eq!(check("uuid5", &json!(v4)), Some(false));
        assert_eq!(check("uuid", &json!("123e4567")), Some(false));
        assert_eq!(check("uri", &json!("not checked")), None);
        assert_eq!(check("date-time", &json!(5)), None);
    }
}
