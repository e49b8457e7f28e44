//! The run's circumstances: the machine it ran on and the date.

/// Cores, CPU model, memory and kernel, from /proc (what is there).
pub(super) fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:").and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
        })
        .map_or(String::new(), |kb| format!(", {:.0} GiB", kb as f64 / (1024.0 * 1024.0)));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores ({cpu}){mem_gib}, Linux {}", read("/proc/sys/kernel/osrelease").trim())
}

/// Today's date and time in UTC, `YYYY-MM-DD HH:MM`.
pub(super) fn utc_date() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", rest / 3600, rest % 3600 / 60)
}
