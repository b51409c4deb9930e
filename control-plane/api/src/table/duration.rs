//! Ages as kubectl shows them: upstream's `duration.HumanDuration`
//! (`k8s.io/apimachinery/pkg/util/duration`), which keeps two or three significant figures
//! (`5s`, `119s`, `3m20s`, `10m`, `179m`, `3h`, `7h59m`, `47h`, `2d1h`, `8d`, `729d`, `2y1d`, `8y`).

use jiff::SignedDuration;

const SECOND: i64 = 1_000_000_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;

/// A duration the way `kubectl get` prints ages (upstream's `duration.HumanDuration`).
///
/// Go's `time.Duration` is an `i64` of nanoseconds, so longer durations saturate at about 292 years,
/// as upstream's `time.Since` does. A negative duration of up to two seconds (clock skew) prints
/// `0s`; more than that prints `<invalid>`.
#[must_use]
pub fn human_duration(duration: SignedDuration) -> String {
    let nanos = i64::try_from(duration.as_nanos()).unwrap_or(if duration.is_negative() {
        i64::MIN
    } else {
        i64::MAX
    });
    human_duration_nanos(nanos)
}

fn human_duration_nanos(d: i64) -> String {
    // Go truncates toward zero (`int(d.Seconds())`), as Rust's integer division does.
    let seconds = d / SECOND;
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d / MINUTE;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d / HOUR;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;
    const DAY: i64 = 24 * HOUR;
    const YEAR: i64 = 365 * DAY;

    fn human(nanos: i64) -> String {
        human_duration(SignedDuration::from_nanos(nanos))
    }

    /// Upstream's `TestHumanDuration`.
    #[test]
    fn upstream_examples() {
        let cases = [
            (SECOND, "1s"),
            (70 * SECOND, "70s"),
            (190 * SECOND, "3m10s"),
            (70 * MINUTE, "70m"),
            (47 * HOUR, "47h"),
            (49 * HOUR, "2d1h"),
            ((8 * 24 + 2) * HOUR, "8d"),
            (367 * 24 * HOUR, "367d"),
            ((365 * 2 * 24 + 25) * HOUR, "2y1d"),
            ((365 * 8 * 24 + 2) * HOUR, "8y"),
        ];
        for (nanos, want) in cases {
            assert_eq!(human(nanos), want, "{nanos}ns");
        }
    }

    /// Upstream's `TestHumanDurationBoundaries`, every row.
    #[test]
    fn upstream_boundaries() {
        let cases = [
            (-2 * SECOND, "<invalid>"),
            (-2 * SECOND + 1, "0s"),
            (0, "0s"),
            (SECOND - MS, "0s"),
            (2 * MINUTE - MS, "119s"),
            (2 * MINUTE, "2m"),
            (2 * MINUTE + SECOND, "2m1s"),
            (10 * MINUTE - MS, "9m59s"),
            (10 * MINUTE, "10m"),
            (10 * MINUTE + SECOND, "10m"),
            (3 * HOUR - MS, "179m"),
            (3 * HOUR, "3h"),
            (3 * HOUR + MINUTE, "3h1m"),
            (8 * HOUR - MS, "7h59m"),
            (8 * HOUR, "8h"),
            (8 * HOUR + 59 * MINUTE, "8h"),
            (2 * DAY - MS, "47h"),
            (2 * DAY, "2d"),
            (2 * DAY + HOUR, "2d1h"),
            (8 * DAY - MS, "7d23h"),
            (8 * DAY, "8d"),
            (8 * DAY + 23 * HOUR, "8d"),
            (2 * YEAR - MS, "729d"),
            (2 * YEAR, "2y"),
            (2 * YEAR + 23 * HOUR, "2y"),
            (2 * YEAR + 23 * HOUR + 59 * MINUTE, "2y"),
            (2 * YEAR + DAY - MS, "2y"),
            (2 * YEAR + DAY, "2y1d"),
            (3 * YEAR, "3y"),
            (4 * YEAR, "4y"),
            (5 * YEAR, "5y"),
            (6 * YEAR, "6y"),
            (7 * YEAR, "7y"),
            (8 * YEAR - MS, "7y364d"),
            (8 * YEAR, "8y"),
            (8 * YEAR + 364 * DAY, "8y"),
            (9 * YEAR, "9y"),
        ];
        for (nanos, want) in cases {
            assert_eq!(human(nanos), want, "{nanos}ns");
        }
    }

    #[test]
    fn the_briefs_examples_and_saturation() {
        assert_eq!(human(5 * SECOND), "5s");
        assert_eq!(human(200 * SECOND), "3m20s");
        assert_eq!(human(3 * HOUR), "3h");
        assert_eq!(human(5 * YEAR + 10 * DAY), "5y10d");
        // Beyond Go's i64 nanoseconds, time.Since saturates at 292 years.
        assert_eq!(human_duration(SignedDuration::from_secs(400 * 365 * 86_400)), "292y");
        assert_eq!(human_duration(SignedDuration::from_secs(-400 * 365 * 86_400)), "<invalid>");
    }
}
