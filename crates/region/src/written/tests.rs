use super::*;
use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};

const PAGES: usize = 300;

/// A private anonymous mapping, or a shared memory one (the kind a region on /dev/shm is).
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn anonymous(len: usize) -> Mapping {
        // SAFETY: a fresh mapping at an address of the kernel's choosing.
        let ptr = unsafe {
            mmap_anonymous(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE)
        }
        .expect("mmap");
        Mapping { ptr: ptr.cast(), len }
    }

    fn shared(len: usize) -> Mapping {
        let fd = rustix::fs::memfd_create("written-test", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
        rustix::fs::ftruncate(&fd, len as u64).expect("size the memfd");
        // SAFETY: a fresh mapping of a file of `len` bytes, at an address of the kernel's choosing.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .expect("mmap");
        Mapping { ptr: ptr.cast(), len }
    }

    fn write(&self, offset: usize, byte: u8) {
        assert!(offset < self.len);
        // SAFETY: inside the mapping, which this test owns.
        unsafe { self.ptr.add(offset).write_volatile(byte) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `anonymous`/`shared`, unused after this.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

fn collected(t: &mut WrittenPages) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    t.collect(|o, l| v.push((o, l))).expect("collect");
    v
}

/// Pages `pages` as the runs a collect reports.
fn runs(page: u64, pages: &[u64]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = Vec::new();
    for &p in pages {
        match v.last_mut() {
            Some((o, l)) if *o + *l == p * page => *l += page,
            _ => v.push((p * page, page)),
        }
    }
    v
}

fn exact(m: &Mapping, method: Method) {
    let page = rustix::param::page_size();
    // SAFETY: the test's own mapping, tracked only here, unmapped after the tracker.
    let mut t = unsafe { WrittenPages::new(m.ptr, m.len, Some(method)) }.expect("track");
    assert_eq!(t.method(), method);
    assert_eq!(collected(&mut t), vec![], "nothing written yet");
    // Single pages, a run, the first and the last page, some written twice.
    let pages = [0u64, 3, 4, 5, 17, 64, 65, 128, 200, PAGES as u64 - 1];
    for &p in &pages {
        m.write(p as usize * page + 7, 1);
        m.write(p as usize * page + page - 1, 2);
    }
    assert_eq!(collected(&mut t), runs(page as u64, &pages));
    assert_eq!(collected(&mut t), vec![], "a second collect with no writes in between");
    // Written again: found again, and only those.
    m.write(4 * page, 3);
    m.write(299 * page + 1, 3);
    assert_eq!(collected(&mut t), runs(page as u64, &[4, 299]));
    // Reads are not writes.
    // SAFETY: inside the mapping.
    let _ = unsafe { m.ptr.add(100 * page).read_volatile() };
    assert_eq!(collected(&mut t), vec![]);
    drop(t);
    m.write(10 * page, 9); // writable after tracking ends
}

#[test]
fn uffd_finds_exactly_the_written_pages_of_anonymous_memory() {
    exact(&Mapping::anonymous(PAGES * rustix::param::page_size()), Method::UffdAsync);
}

#[test]
fn uffd_finds_exactly_the_written_pages_of_shared_memory() {
    exact(&Mapping::shared(PAGES * rustix::param::page_size()), Method::UffdAsync);
}

#[test]
fn mprotect_finds_exactly_the_written_pages_of_anonymous_memory() {
    exact(&Mapping::anonymous(PAGES * rustix::param::page_size()), Method::Mprotect);
}

#[test]
fn mprotect_finds_exactly_the_written_pages_of_shared_memory() {
    exact(&Mapping::shared(PAGES * rustix::param::page_size()), Method::Mprotect);
}

/// More written runs than one scan returns (512): the collect scans on from where it stopped.
/// Makes `userfaultfd(2)` fail with ENOSYS in the calling thread (and only there), as on a
/// kernel built without it: a seccomp filter.
fn deny_userfaultfd_in_this_thread() {
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let nr = libc::SYS_userfaultfd as u32;
    let filter = [
        // A = seccomp_data.nr
        libc::sock_filter { code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, jt: 0, jf: 0, k: 0 },
        // if A == userfaultfd: next, else skip one
        libc::sock_filter { code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16, jt: 0, jf: 1, k: nr },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
        libc::sock_filter { code: (libc::BPF_RET | libc::BPF_K) as u16, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW },
    ];
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments; PR_SET_SECCOMP reads the program
    // `prog` points to, which lives through the call. The filter only turns one system call
    // into an error, for this thread (no TSYNC).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0, "no_new_privs");
        assert_eq!(
            libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog),
            0,
            "install the seccomp filter: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn without_userfaultfd_page_protection_is_chosen_and_says_why() {
    // A thread of its own: the filter stays with it and ends with it.
    std::thread::spawn(|| {
        deny_userfaultfd_in_this_thread();
        let page = rustix::param::page_size();
        let m = Mapping::anonymous(16 * page);
        // SAFETY: the test's own mapping, alive until the tracker is dropped below.
        let mut t = unsafe { WrittenPages::new(m.ptr, m.len, None) }.expect("track");
        assert_eq!(t.method(), Method::Mprotect);
        let why = t.fallback().expect("the fallback says why");
        assert!(why.contains("userfaultfd"), "{why}");
        m.write(3 * page, 1);
        assert_eq!(collected(&mut t), runs(page as u64, &[3]));
        drop(t);
        // Asked for by name, userfaultfd is an error, not a silent fallback.
        // SAFETY: as above.
        assert!(unsafe { WrittenPages::new(m.ptr, m.len, Some(Method::UffdAsync)) }.is_err());
    })
    .join()
    .expect("the test thread");
}

#[test]
fn uffd_collects_more_runs_than_one_scan_holds() {
    let page = rustix::param::page_size();
    let m = Mapping::anonymous(2000 * page);
    // SAFETY: the test's own mapping.
    let mut t = unsafe { WrittenPages::new(m.ptr, m.len, Some(Method::UffdAsync)) }.expect("track");
    let pages: Vec<u64> = (0..2000).step_by(2).collect();
    for &p in &pages {
        m.write(p as usize * page, 1);
    }
    assert_eq!(collected(&mut t), runs(page as u64, &pages));
}

/// A range that is not whole pages is refused, naming it.
#[test]
fn a_range_of_part_pages_is_refused() {
    let page = rustix::param::page_size();
    let m = Mapping::anonymous(4 * page);
    // SAFETY: the test's own mapping (the call fails before touching it).
    let e = unsafe { WrittenPages::new(m.ptr.wrapping_add(1), page, None) }.err().expect("refused");
    assert!(e.to_string().contains("not whole pages"), "{e}");
}
