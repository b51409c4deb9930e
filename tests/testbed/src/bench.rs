//! The harness Keel's benchmark programs share: interleaved rounds of Keel and a peer, medians, ratios,
//! CPU time, and the closing `bench NAME: key=value ...` line that `cargo xtask bench` reads.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Durations of repeated runs of one operation.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    durations: Vec<Duration>,
}

impl Samples {
    pub fn push(&mut self, d: Duration) {
        self.durations.push(d);
    }

    pub fn len(&self) -> usize {
        self.durations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.durations.is_empty()
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut sorted = self.durations.clone();
        sorted.sort();
        sorted
    }

    pub fn median(&self) -> Duration {
        let sorted = self.sorted();
        match sorted.len() {
            0 => Duration::ZERO,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
        }
    }

    /// The `p`-th percentile (0–100), nearest rank.
    pub fn percentile(&self, p: f64) -> Duration {
        let sorted = self.sorted();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// Adds every sample of `other`.
    pub fn extend(&mut self, other: &Samples) {
        self.durations.extend_from_slice(&other.durations);
    }

    pub fn min(&self) -> Duration {
        self.sorted().first().copied().unwrap_or_default()
    }

    pub fn max(&self) -> Duration {
        self.sorted().last().copied().unwrap_or_default()
    }
}

/// Times one call of `f`.
pub fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

/// Runs `keel` and `peer` for `rounds` rounds, alternating which goes first, so the machine's noise
/// falls on both alike. Each closure gets the round number.
pub fn interleaved(
    rounds: usize,
    mut keel: impl FnMut(usize),
    mut peer: impl FnMut(usize),
) -> (Samples, Samples) {
    let (mut k, mut p) = (Samples::default(), Samples::default());
    for round in 0..rounds {
        if round % 2 == 0 {
            k.push(time(|| keel(round)).1);
            p.push(time(|| peer(round)).1);
        } else {
            p.push(time(|| peer(round)).1);
            k.push(time(|| keel(round)).1);
        }
    }
    (k, p)
}

/// CPU time (user + system) this process and its waited-for children have used so far.
pub fn cpu_time() -> Duration {
    let usage = |who| {
        // SAFETY: getrusage writes into the zeroed struct we pass; both `who` values are valid.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `ru` is a valid, writable rusage.
        unsafe { libc::getrusage(who, &raw mut ru) };
        let tv = |t: libc::timeval| {
            Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
                + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
        };
        tv(ru.ru_utime) + tv(ru.ru_stime)
    };
    usage(libc::RUSAGE_SELF) + usage(libc::RUSAGE_CHILDREN)
}

/// CPU time (user + system) another process has used so far, from `/proc/PID/stat`, and its resident
/// memory in bytes (`VmRSS`); zeros when the process is gone.
pub fn process_usage(pid: u32) -> (Duration, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces and parentheses): utime and stime are
    // the 12th and 13th of them.
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect())
        .unwrap_or_default();
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100).max(1);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (Duration::from_micros(ticks * 1_000_000 / hz), rss_kib * 1024)
}

/// Milliseconds with three decimals, for tables and headlines.
pub fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

/// peer/keel of the medians: above 1, Keel is faster.
pub fn ratio(keel: &Samples, peer: &Samples) -> String {
    let k = keel.median().as_secs_f64();
    if k == 0.0 { "inf".into() } else { format!("{:.2}", peer.median().as_secs_f64() / k) }
}

/// The figures of one benchmark run; `print` writes the table and the closing headline.
#[derive(Debug)]
pub struct Report {
    name: String,
    rows: Vec<String>,
    headline: Vec<(String, String)>,
}

impl Report {
    pub fn new(name: &str) -> Report {
        Report { name: name.to_owned(), rows: Vec::new(), headline: Vec::new() }
    }

    /// A table row comparing Keel and a peer on one operation, and its ratio in the headline as
    /// `<key>_ratio`, with Keel's median as `<key>_ms`.
    pub fn compare(&mut self, key: &str, what: &str, keel: &Samples, peer_name: &str, peer: &Samples) {
        self.rows.push(format!(
            "{what:<44} keel median {:>9} ms (min {:>9}, max {:>9}) | {peer_name} median {:>9} ms | \
             ratio {:>6}",
            ms(keel.median()),
            ms(keel.min()),
            ms(keel.max()),
            ms(peer.median()),
            ratio(keel, peer)
        ));
        self.headline.push((format!("{key}_ms"), ms(keel.median())));
        self.headline.push((format!("{key}_{}_ms", sanitize(peer_name)), ms(peer.median())));
        self.headline.push((format!("{key}_ratio"), ratio(keel, peer)));
    }

    /// A figure with no peer (give its CPU time per operation beside it).
    pub fn figure(&mut self, key: &str, what: &str, value: &str) {
        self.rows.push(format!("{what:<44} {value}"));
        self.headline.push((key.to_owned(), value.to_owned()));
    }

    pub fn print(&self) {
        for row in &self.rows {
            println!("{row}");
        }
        let mut line = format!("bench {}:", self.name);
        for (k, v) in &self.headline {
            let _ = write!(line, " {k}={v}");
        }
        println!("{line}");
    }
}

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_usage_reads_this_process() {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(50) {
            std::hint::black_box(started.elapsed());
        }
        let (cpu, rss) = process_usage(std::process::id());
        assert!(cpu > Duration::ZERO && rss > 1 << 20, "{cpu:?} {rss}");
        assert_eq!(process_usage(u32::MAX), (Duration::ZERO, 0));
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        let mut s = Samples::default();
        for ms in [5, 1, 3] {
            s.push(Duration::from_millis(ms));
        }
        assert_eq!(s.median(), Duration::from_millis(3));
        s.push(Duration::from_millis(7));
        assert_eq!(s.median(), Duration::from_millis(4));
        assert_eq!((s.min(), s.max()), (Duration::from_millis(1), Duration::from_millis(7)));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut s = Samples::default();
        for ms in 1..=100 {
            s.push(Duration::from_millis(ms));
        }
        assert_eq!(s.percentile(50.0), Duration::from_millis(50));
        assert_eq!(s.percentile(99.0), Duration::from_millis(99));
        assert_eq!(s.percentile(100.0), Duration::from_millis(100));
        assert_eq!(s.percentile(0.0), Duration::from_millis(1));
        assert_eq!(Samples::default().percentile(99.0), Duration::ZERO);
    }

    #[test]
    fn ratio_is_peer_over_keel() {
        let mut keel = Samples::default();
        keel.push(Duration::from_millis(2));
        let mut peer = Samples::default();
        peer.push(Duration::from_millis(5));
        assert_eq!(ratio(&keel, &peer), "2.50");
    }

    #[test]
    fn interleaving_runs_both_every_round() {
        let (mut a, mut b) = (0, 0);
        let (ka, kb) = interleaved(5, |_| a += 1, |_| b += 1);
        assert_eq!((a, b, ka.len(), kb.len()), (5, 5, 5, 5));
    }
}
