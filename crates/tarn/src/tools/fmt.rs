//! How the tools print attributes: `ls -l` mode strings and dates (UTC:
//! the tools read no time zone database).

use client::remote::{FileType, Time};

pub fn type_char(t: Option<FileType>) -> char {
    match t {
        Some(FileType::Directory) => 'd',
        Some(FileType::Symlink) => 'l',
        Some(FileType::Block) => 'b',
        Some(FileType::Char) => 'c',
        Some(FileType::Socket) => 's',
        Some(FileType::Fifo) => 'p',
        Some(FileType::Regular) => '-',
        _ => '?',
    }
}

pub fn type_name(t: Option<FileType>) -> &'static str {
    match t {
        Some(FileType::Regular) => "regular file",
        Some(FileType::Directory) => "directory",
        Some(FileType::Symlink) => "symbolic link",
        Some(FileType::Block) => "block device",
        Some(FileType::Char) => "character device",
        Some(FileType::Socket) => "socket",
        Some(FileType::Fifo) => "fifo",
        _ => "unknown",
    }
}

/// "drwxr-xr-x", with s/S and t/T for set-id and sticky bits as ls shows them.
pub fn mode_string(t: Option<FileType>, mode: Option<u32>) -> String {
    let mut s = String::with_capacity(10);
    s.push(type_char(t));
    let Some(m) = mode else {
        s.push_str("?????????");
        return s;
    };
    let special = [(0o4000, 's'), (0o2000, 's'), (0o1000, 't')];
    for (i, (bit, ch)) in special.iter().enumerate() {
        let shift = 6 - 3 * i as u32;
        let r = m >> shift & 4 != 0;
        let w = m >> shift & 2 != 0;
        let x = m >> shift & 1 != 0;
        s.push(if r { 'r' } else { '-' });
        s.push(if w { 'w' } else { '-' });
        s.push(match (m & bit != 0, x) {
            (true, true) => *ch,
            (true, false) => ch.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// (year, month 1-12, day 1-31) of a day count since 1970-01-01, by the
/// proleptic Gregorian calendar (400-year eras of 146097 days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // from March 1st
    let mp = (5 * doy + 2) / 153; // month from March, 0..11
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn split(t: &Time) -> (i64, u32, u32, u32, u32, u32) {
    let days = t.seconds.div_euclid(86_400);
    let secs = t.seconds.rem_euclid(86_400) as u32;
    let (y, mo, d) = civil(days);
    (y, mo, d, secs / 3600, secs / 60 % 60, secs % 60)
}

/// ls's date column: "Nov 24 11:05" within six months of `now`, else
/// "Nov 24  2025".
pub fn ls_time(t: Option<&Time>, now: i64) -> String {
    let Some(t) = t else {
        return "?".repeat(12);
    };
    let (y, mo, d, h, mi, _) = split(t);
    let m = MONTHS[mo as usize - 1];
    const HALF_YEAR: i64 = 365 * 86_400 / 2;
    if (now - t.seconds).abs() < HALF_YEAR {
        format!("{m} {d:>2} {h:02}:{mi:02}")
    } else {
        format!("{m} {d:>2} {y:>5}")
    }
}

/// stat's form: "2026-11-24 11:05:12.000000123 +0000".
pub fn full_time(t: Option<&Time>) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let (y, mo, d, h, mi, s) = split(t);
    format!(
        "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{:09} +0000",
        t.nseconds
    )
}

/// Seconds since the Unix epoch, now (the clock certificate checks use).
pub fn now_secs() -> i64 {
    rpc::x509::unix_now()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(seconds: i64) -> Time {
        Time {
            seconds,
            nseconds: 0,
        }
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(-1), (1969, 12, 31));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(11_017), (2000, 3, 1));
        // 2026-11-24
        assert_eq!(civil(20_781), (2026, 11, 24));
    }

    #[test]
    fn times() {
        let x = 20_781 * 86_400 + 11 * 3600 + 5 * 60 + 12;
        assert_eq!(
            full_time(Some(&t(x))),
            "2026-11-24 11:05:12.000000000 +0000"
        );
        assert_eq!(ls_time(Some(&t(x)), x + 100), "Nov 24 11:05");
        assert_eq!(ls_time(Some(&t(x)), x + 400 * 86_400), "Nov 24  2026");
        assert_eq!(full_time(None), "-");
    }

    #[test]
    fn mode_strings() {
        let d = Some(FileType::Directory);
        let f = Some(FileType::Regular);
        assert_eq!(mode_string(d, Some(0o755)), "drwxr-xr-x");
        assert_eq!(mode_string(f, Some(0o640)), "-rw-r-----");
        assert_eq!(mode_string(f, Some(0o4755)), "-rwsr-xr-x");
        assert_eq!(mode_string(f, Some(0o2644)), "-rw-r-Sr--");
        assert_eq!(mode_string(d, Some(0o1777)), "drwxrwxrwt");
        assert_eq!(mode_string(d, Some(0o1776)), "drwxrwxrwT");
        assert_eq!(mode_string(Some(FileType::Symlink), None), "l?????????");
    }
}
