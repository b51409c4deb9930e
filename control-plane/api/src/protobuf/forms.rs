//! The JSON forms upstream writes by hand for metav1.Time, MicroTime and Duration.

use super::ProtobufError;

/// An RFC 3339 time as (seconds, nanoseconds); Time keeps whole seconds (upstream's protobuf
/// Time drops the nanoseconds, as its JSON form has none), MicroTime microseconds.
pub fn parse_time(text: &str, micro: bool) -> Result<(i64, i32), String> {
    let timestamp: jiff::Timestamp = text.parse().map_err(|e| format!("parsing time {text:?}: {e}"))?;
    // As Go's Timestamp: whole seconds counted down (before 1970 jiff's truncate toward zero), the
    // nanoseconds never negative.
    let (mut seconds, mut nanos) = (timestamp.as_second(), timestamp.subsec_nanosecond());
    if nanos < 0 {
        seconds -= 1;
        nanos += 1_000_000_000;
    }
    Ok((seconds, if micro { nanos / 1000 * 1000 } else { 0 }))
}

/// Upstream's JSON of a time: `2006-01-02T15:04:05Z` (Time) or `2006-01-02T15:04:05.000000Z`
/// (MicroTime), in UTC.
pub fn format_time(seconds: i64, nanos: i32, micro: bool) -> Result<String, ProtobufError> {
    let nanos = if micro { nanos.clamp(0, 999_999_999) } else { 0 };
    let timestamp = jiff::Timestamp::new(seconds, nanos)
        .map_err(|e| ProtobufError(format!("time {seconds}s out of range: {e}")))?;
    let whole = timestamp.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    Ok(if micro { format!("{whole}.{:06}Z", nanos / 1000) } else { format!("{whole}Z") })
}

/// Go's `time.Duration.String()` of `nanos` (`1h0m0s`, `1.5s`, `300ms`). Written here: the
/// duration crates format differently (jiff's friendly form is `1h 30m`).
pub fn format_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let fraction = |value: u64, unit: u64, width: usize| {
        let (whole, rest) = (value / unit, value % unit);
        if rest == 0 {
            whole.to_string()
        } else {
            let digits = format!("{rest:0width$}");
            format!("{whole}.{}", digits.trim_end_matches('0'))
        }
    };
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", fraction(n, 1_000, 3));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", fraction(n, 1_000_000, 6));
    }
    let seconds = n / 1_000_000_000;
    let (hours, minutes) = (seconds / 3600, (seconds % 3600) / 60);
    let second = fraction(n % 60_000_000_000, 1_000_000_000, 9);
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{second}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{second}s")
    } else {
        format!("{sign}{second}s")
    }
}

/// Go's `time.ParseDuration`: an optional sign, then numbers (with fractions) each with a unit of
/// ns, us (µs), ms, s, m, h; `0` alone is allowed.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {text:?}");
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().map_err(|_| invalid())?;
        rest = &rest[number_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_end..];
        total += number * unit;
    }
    if total > i64::MAX as f64 {
        return Err(invalid());
    }
    let nanos = total.round() as i64;
    Ok(if negative { -nanos } else { nanos })
}
