//! CPU time (user + system) of a process or of the calling thread, from `/proc`, for benchmarks
//! that report what a transfer cost besides how long it took. Resolution is the kernel's clock
//! tick (10 ms on most systems).

use std::io;
use std::time::Duration;

/// CPU time of process `pid` so far, every thread's, the exited ones' too.
pub fn process(pid: u32) -> io::Result<Duration> {
    of_stat(&format!("/proc/{pid}/stat"))
}

/// CPU time of the calling thread so far.
pub fn this_thread() -> io::Result<Duration> {
    of_stat("/proc/thread-self/stat")
}

fn of_stat(path: &str) -> io::Result<Duration> {
    let text = std::fs::read_to_string(path)?;
    let ticks = parse_stat(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: unexpected contents")))?;
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    Ok(Duration::from_secs_f64(ticks as f64 / per_second as f64))
}

/// utime + stime (fields 14 and 15 of `proc_pid_stat(5)`), in clock ticks. The command name
/// (field 2) is in parentheses and may hold spaces or parentheses itself: fields are counted
/// from the last `)`.
fn parse_stat(text: &str) -> Option<u64> {
    let rest = text.get(text.rfind(')')? + 1..)?;
    let mut fields = rest.split_ascii_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    user.checked_add(system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_user_and_system_ticks_past_an_awkward_name() {
        let line = "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 3 0 99 0 0\n";
        assert_eq!(parse_stat(line), Some(42));
        assert_eq!(parse_stat("4242 (x) S 1 2"), None, "too few fields");
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn a_busy_thread_is_charged_for_its_work() {
        let before = this_thread().unwrap();
        let start = std::time::Instant::now();
        let mut x = 1u64;
        let mut used = Duration::ZERO;
        // Until the thread has been charged 50 ms (however slowly a loaded machine runs it).
        while used < Duration::from_millis(50) && start.elapsed() < Duration::from_secs(30) {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            used = this_thread().unwrap() - before;
        }
        std::hint::black_box(x);
        assert!(used >= Duration::from_millis(50), "30 s of spinning charged only {used:?}");
        assert!(process(std::process::id()).unwrap() >= used);
    }
}
