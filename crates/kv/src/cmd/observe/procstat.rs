//! What the kernel says of the process, for INFO: CPU time (`# CPU`) and resident memory
//! (`used_memory_rss`), read from `/proc/self/stat` and `/proc/thread-self/stat` (the same
//! accounting `getrusage` reads, in clock ticks), and `/proc/self/statm`.

use std::fmt::Write;

/// CPU seconds: system and user, of the process, of its waited-for children, and of the thread
/// that asks (the event loop's).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cpu {
    /// System CPU seconds of the process.
    pub sys: f64,
    /// User CPU seconds of the process.
    pub user: f64,
    /// System CPU seconds of its waited-for children.
    pub sys_children: f64,
    /// User CPU seconds of its waited-for children.
    pub user_children: f64,
    /// System CPU seconds of the thread that asks.
    pub sys_main_thread: f64,
    /// User CPU seconds of the thread that asks.
    pub user_main_thread: f64,
}

/// The fields after the command name of a `stat` file (the name, in parentheses, may hold
/// spaces: it ends at the last `)`), from the state (field 3) on.
fn stat_fields(text: &str) -> Option<Vec<&str>> {
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// utime, stime, cutime, cstime (fields 14 to 17) of a `stat` file, in clock ticks.
fn times(text: &str) -> Option<[u64; 4]> {
    let f = stat_fields(text)?;
    // Field 3 is f[0]: field n is f[n - 3].
    let get = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some([get(14)?, get(15)?, get(16)?, get(17)?])
}

impl Cpu {
    /// Reads the process's and this thread's times (zeros where `/proc` cannot be read).
    pub fn now() -> Cpu {
        let tick = rustix::param::clock_ticks_per_second().max(1) as f64;
        let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|t| times(&t)).unwrap_or_default();
        let [u, s, cu, cs] = read("/proc/self/stat");
        let [tu, ts, _, _] = read("/proc/thread-self/stat");
        Cpu {
            sys: s as f64 / tick,
            user: u as f64 / tick,
            sys_children: cs as f64 / tick,
            user_children: cu as f64 / tick,
            sys_main_thread: ts as f64 / tick,
            user_main_thread: tu as f64 / tick,
        }
    }

    /// Writes the `# CPU` section as Redis does (seconds, six decimals).
    pub fn write_info(&self, t: &mut String) {
        let _ = write!(
            t,
            "# CPU\r\nused_cpu_sys:{:.6}\r\nused_cpu_user:{:.6}\r\nused_cpu_sys_children:{:.6}\r\n\
             used_cpu_user_children:{:.6}\r\nused_cpu_sys_main_thread:{:.6}\r\nused_cpu_user_main_thread:{:.6}\r\n\r\n",
            self.sys, self.user, self.sys_children, self.user_children, self.sys_main_thread, self.user_main_thread
        );
    }
}

/// The process's resident set, in bytes (0 where `/proc/self/statm` cannot be read).
pub fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|t| t.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    pages * rustix::param::page_size() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_whose_name_holds_spaces_and_parentheses() {
        let line = "4242 (mojim (kv) x) S 1 2 3 4 5 6 7 8 9 10 111 222 333 444 20 0 1 0";
        assert_eq!(times(line), Some([111, 222, 333, 444]));
        assert_eq!(times("garbage"), None);
    }

    #[test]
    fn this_process_has_spent_time_and_holds_memory() {
        // Spin until the kernel has charged at least one tick to this thread.
        let start = Cpu::now();
        let mut x = 0u64;
        while Cpu::now().user_main_thread + Cpu::now().sys_main_thread
            <= start.user_main_thread + start.sys_main_thread
        {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let c = Cpu::now();
        assert!(c.user + c.sys > 0.0 && x > 0, "{c:?}");
        assert!(rss_bytes() > 0);
        let mut t = String::new();
        c.write_info(&mut t);
        assert!(t.starts_with("# CPU\r\nused_cpu_sys:") && t.contains("used_cpu_user_children:"), "{t}");
    }
}
