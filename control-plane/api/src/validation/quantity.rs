//! Resource quantities (`resource.Quantity`): parsing, comparison and the canonical form upstream
//! prints them in (`500m`, `1Gi`, `1k`).

use std::cmp::Ordering;

/// How a quantity was written, which its canonical form keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// `Ki`, `Mi`...
    BinarySi,
    /// `m`, `k`, `M`... or no suffix.
    DecimalSi,
    /// `e3`, `E-2`.
    DecimalExponent,
}

/// A quantity: `mantissa × 10^exponent`, exact to the nano. Equal when their values are (`1` and
/// `1000m` are), as upstream's `Cmp`; the format only says how it was written.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    mantissa: i128,
    exponent: i32,
    format: Format,
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

impl Quantity {
    /// Parses `1.5Gi`, `100m`, `2e3`; `None` if it is not a quantity.
    pub fn parse(text: &str) -> Option<Quantity> {
        let text = text.trim();
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
            return None;
        }
        let digits = format!("{whole}{fraction}");
        let mut mantissa: i128 = digits.trim_start_matches('0').parse().unwrap_or(0);
        if digits.trim_start_matches('0').len() > 30 {
            return None;
        }
        let mut exponent = -i32::try_from(fraction.len()).ok()?;
        let (format, scale, binary) = match suffix {
            "" => (Format::DecimalSi, 0, 0),
            "n" => (Format::DecimalSi, -9, 0),
            "u" => (Format::DecimalSi, -6, 0),
            "m" => (Format::DecimalSi, -3, 0),
            "k" => (Format::DecimalSi, 3, 0),
            "M" => (Format::DecimalSi, 6, 0),
            "G" => (Format::DecimalSi, 9, 0),
            "T" => (Format::DecimalSi, 12, 0),
            "P" => (Format::DecimalSi, 15, 0),
            "E" => (Format::DecimalSi, 18, 0),
            "Ki" => (Format::BinarySi, 0, 1),
            "Mi" => (Format::BinarySi, 0, 2),
            "Gi" => (Format::BinarySi, 0, 3),
            "Ti" => (Format::BinarySi, 0, 4),
            "Pi" => (Format::BinarySi, 0, 5),
            "Ei" => (Format::BinarySi, 0, 6),
            other if other.starts_with(['e', 'E']) => {
                let power: i32 = other[1..].parse().ok()?;
                if !(-100..=100).contains(&power) {
                    return None;
                }
                (Format::DecimalExponent, power, 0)
            }
            _ => return None,
        };
        exponent += scale;
        mantissa = mantissa.checked_mul(1024i128.checked_pow(binary)?)?;
        // Finer than a nano: rounded up (away from zero), as upstream.
        if exponent < -9 {
            let divisor = pow10(u32::try_from(-9 - exponent).ok()?)?;
            mantissa = mantissa / divisor + i128::from(mantissa % divisor != 0);
            exponent = -9;
        }
        if negative {
            mantissa = -mantissa;
        }
        Some(Quantity { mantissa, exponent, format })
    }

    /// `bytes` in the binary format (upstream's `NewQuantity(n, BinarySI)`: memory, storage).
    pub fn from_bytes(bytes: i64) -> Quantity {
        Quantity { mantissa: i128::from(bytes), exponent: 0, format: Format::BinarySi }
    }

    /// A whole count in the decimal format (`NewQuantity(n, DecimalSI)`: pods, CPUs).
    pub fn from_count(count: i64) -> Quantity {
        Quantity { mantissa: i128::from(count), exponent: 0, format: Format::DecimalSi }
    }

    /// The value rounded up to a whole number (upstream's `Value()`), saturating at i64's bounds.
    pub fn value(&self) -> i64 {
        let whole = if self.exponent >= 0 {
            u32::try_from(self.exponent).ok().and_then(pow10).and_then(|p| self.mantissa.checked_mul(p))
        } else {
            let divisor = u32::try_from(-self.exponent).ok().and_then(pow10).unwrap_or(i128::MAX);
            let quotient = self.mantissa.div_euclid(divisor);
            Some(if self.mantissa.rem_euclid(divisor) == 0 { quotient } else { quotient + 1 })
        };
        let whole = whole.unwrap_or(if self.mantissa < 0 { i128::MIN } else { i128::MAX });
        i64::try_from(whole).unwrap_or(if whole < 0 { i64::MIN } else { i64::MAX })
    }

    /// The value in thousandths, rounded up (upstream's `MilliValue()`: millicores).
    pub fn milli_value(&self) -> i64 {
        Quantity { exponent: self.exponent + 3, ..*self }.value()
    }

    /// `self − other` in `self`'s format (upstream's `Sub`), or `None` when it does not fit.
    pub fn checked_sub(&self, other: &Quantity) -> Option<Quantity> {
        let low = self.exponent.min(other.exponent);
        let scaled = |q: &Quantity| {
            u32::try_from(q.exponent - low).ok().and_then(pow10).and_then(|p| q.mantissa.checked_mul(p))
        };
        let mantissa = scaled(self)?.checked_sub(scaled(other)?)?;
        Some(Quantity { mantissa, exponent: low, format: self.format })
    }

    /// Whether the quantity is zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// Whether the quantity is below zero.
    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// The canonical form (upstream's `Quantity.String()`).
    pub fn canonical(&self) -> String {
        if self.mantissa == 0 {
            return "0".to_owned();
        }
        let (mut mantissa, mut exponent) = (self.mantissa, self.exponent);
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        let mut format = self.format;
        if format == Format::BinarySi {
            let integer = if exponent >= 0 {
                u32::try_from(exponent).ok().and_then(pow10).and_then(|p| mantissa.checked_mul(p))
            } else {
                None
            };
            match integer {
                Some(n) if n.abs() >= 1024 => {
                    let (mut n, mut power) = (n, 0);
                    while power < 6 && n % 1024 == 0 {
                        n /= 1024;
                        power += 1;
                    }
                    let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
                    return format!("{n}{suffix}");
                }
                _ => format = Format::DecimalSi,
            }
        }
        match exponent.rem_euclid(3) {
            1 => {
                mantissa *= 10;
                exponent -= 1;
            }
            2 => {
                mantissa *= 100;
                exponent -= 2;
            }
            _ => {}
        }
        if format == Format::DecimalExponent {
            return if exponent == 0 { mantissa.to_string() } else { format!("{mantissa}e{exponent}") };
        }
        let suffixes = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
        let at = (exponent + 9) / 3;
        match usize::try_from(at) {
            Ok(at) if at < suffixes.len() => format!("{mantissa}{}", suffixes[at]),
            _ => format!("{mantissa}e{exponent}"),
        }
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Quantity) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Quantity) -> Ordering {
        let low = self.exponent.min(other.exponent);
        let scaled = |q: &Quantity| {
            u32::try_from(q.exponent - low).ok().and_then(pow10).and_then(|p| q.mantissa.checked_mul(p))
        };
        match (scaled(self), scaled(other)) {
            (Some(a), Some(b)) => a.cmp(&b),
            // Too far apart to scale: the sign and magnitude decide.
            _ => {
                let approx = |q: &Quantity| q.mantissa as f64 * 10f64.powi(q.exponent);
                approx(self).partial_cmp(&approx(other)).unwrap_or(Ordering::Equal)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Quantity::parse(text).unwrap().canonical()
    }

    #[test]
    fn made_and_subtracted_as_upstream() {
        assert_eq!(Quantity::parse("250m").unwrap().milli_value(), 250);
        assert_eq!(Quantity::parse("1.5").unwrap().milli_value(), 1500);
        assert_eq!(Quantity::parse("1n").unwrap().milli_value(), 1);
        let memory = Quantity::from_bytes(8_336_478_208);
        assert_eq!(memory.canonical(), "8141092Ki");
        let reserved = Quantity::parse("100Mi").unwrap();
        assert_eq!(memory.checked_sub(&reserved).unwrap().canonical(), "8038692Ki");
        // A binary quantity that is no whole number of Ki prints its bytes.
        assert_eq!(Quantity::from_bytes(94_580_335_255).canonical(), "94580335255");
        assert_eq!(Quantity::from_count(110).canonical(), "110");
        assert_eq!(Quantity::parse("1500m").unwrap().value(), 2);
        assert_eq!(Quantity::parse("-1500m").unwrap().value(), -1);
        assert_eq!(Quantity::parse("2Gi").unwrap().value(), 2_147_483_648);
        let cpu = Quantity::from_count(4).checked_sub(&Quantity::parse("500m").unwrap()).unwrap();
        assert_eq!(cpu.canonical(), "3500m");
        assert!(Quantity::from_count(1).checked_sub(&Quantity::from_count(2)).unwrap().is_negative());
    }

    #[test]
    fn canonical_forms() {
        for (written, shown) in [
            ("100m", "100m"),
            ("0.5", "500m"),
            ("1000m", "1"),
            ("1000", "1k"),
            ("2Gi", "2Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("512", "512"),
            ("0.5Gi", "512Mi"),
            ("100Ki", "100Ki"),
            ("1e3", "1e3"),
            ("1.5", "1500m"),
            ("0", "0"),
            ("-1", "-1"),
            ("128974848", "128974848"),
            ("129e6", "129e6"),
            ("123Mi", "123Mi"),
        ] {
            assert_eq!(canonical(written), shown, "{written}");
        }
        assert!(Quantity::parse("abc").is_none());
        assert!(Quantity::parse("1Xi").is_none());
    }

    #[test]
    fn ordering() {
        let q = |s| Quantity::parse(s).unwrap();
        assert!(q("500m") < q("1"));
        assert!(q("1Gi") > q("1G"));
        assert_eq!(q("1000m").cmp(&q("1")), Ordering::Equal);
        assert!(q("-1").is_negative());
        assert!(q("2") > q("1999m"));
        assert_eq!(q("1000m"), q("1"), "equal values are equal whatever their form");
        assert_eq!(q("2Mi"), q("2097152"));
        assert_ne!(q("1k"), q("1Ki"));
    }
}
