//! Wall-clock timestamps in text form, shared by the inputs that carry them (Vector's flat
//! JSON records, Alertmanager webhooks).

/// Unix nanoseconds of an RFC 3339 time such as Vector's `2024-05-01T12:00:00.123456789Z`.
pub fn rfc3339_to_unix_ns(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20
        || b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
    {
        return None;
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ns: i64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let digits = s.get(start..i)?;
        if digits.is_empty() {
            return None;
        }
        let kept = &digits[..digits.len().min(9)];
        frac_ns = kept.parse::<i64>().ok()? * 10_i64.pow(9 - kept.len() as u32);
    }
    let offset_s: i64 = match s.get(i..)? {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && matches!(tz.as_bytes().first(), Some(b'+' | b'-')) => {
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (num(i + 1, 2)? * 3600 + num(i + 4, 2)? * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    u64::try_from(secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)?).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_match_known_epochs() {
        // 2000-03-01 is 11017 days after the epoch (a leap-year boundary case).
        assert_eq!(rfc3339_to_unix_ns("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            rfc3339_to_unix_ns("2000-03-01T00:00:01.5Z"),
            Some(11_017 * 86_400 * 1_000_000_000 + 1_500_000_000)
        );
        assert_eq!(rfc3339_to_unix_ns("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(
            rfc3339_to_unix_ns("1970-01-01T00:00:00.000000001Z"),
            Some(1)
        );
        assert_eq!(rfc3339_to_unix_ns("not a time at all, no"), None);
        assert_eq!(rfc3339_to_unix_ns("1970-13-01T00:00:00Z"), None);
    }

    #[test]
    fn alertmanager_timestamps_become_unix_nanoseconds() {
        // `date -u -d 2026-11-22T14:20:25Z +%s` = 1795357225.
        assert_eq!(
            rfc3339_to_unix_ns("2026-11-22T14:20:25Z"),
            Some(1_795_357_225_000_000_000)
        );
        assert_eq!(
            rfc3339_to_unix_ns("2026-11-22T15:20:25.5+01:00"),
            Some(1_795_357_225_500_000_000)
        );
        assert_eq!(
            rfc3339_to_unix_ns("1970-01-01T00:00:01.000000001Z"),
            Some(1_000_000_001)
        );
        // Alertmanager's "no time" and garbage.
        assert_eq!(rfc3339_to_unix_ns("0001-01-01T00:00:00Z"), None);
        assert_eq!(rfc3339_to_unix_ns("1969-12-31T23:59:59Z"), None);
        assert_eq!(rfc3339_to_unix_ns("yesterday"), None);
        assert_eq!(rfc3339_to_unix_ns("2026-13-22T14:20:25Z"), None);
    }
}
