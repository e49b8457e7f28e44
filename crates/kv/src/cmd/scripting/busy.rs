//! While a script runs past its time limit (`busy-reply-threshold`, `lua-time-limit`), the
//! other clients are let in from its hook: `SCRIPT KILL` and `FUNCTION KILL` end a script that
//! has not written, `FUNCTION STATS`, `AUTH`, `QUIT`, `MULTI`, `DISCARD` and `UNWATCH` are
//! answered, and every other command gets Redis's `-BUSY`, which fails the transaction of a
//! client in `MULTI` (its `EXEC` answers `-EXECABORT` and ends it), as in Redis. The server does
//! the I/O ([`Host::serve_busy`]); this decides the answers.

use super::run::Shared;
use crate::cmd::{args, Args, Auth, Host, Multi, Session, NOAUTH, WRONGPASS};
use crate::resp::Reply;

/// What the server does with the client after an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    /// Go on with its next request.
    Done,
    /// Close it once the reply is written (`QUIT`).
    Close,
}

/// `-BUSY` for an `EVAL`.
pub const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
/// `-BUSY` for a function.
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
/// `-UNKILLABLE`: the script has written.
pub const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the dataset. \
You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";

/// Lets the other clients in once (from the running script's hook).
pub fn serve(host: &dyn Host, shared: &Shared) {
    host.serve_busy(&mut |s, a, r| answer(host, shared, s, a, r));
}

/// `SCRIPT KILL` (`eval`) or `FUNCTION KILL` of the running script.
pub fn kill(shared: &Shared, eval: bool, r: &mut Reply) {
    let mut run = shared.borrow_mut();
    if !run.active {
        return r.error("NOTBUSY No scripts in execution right now.");
    }
    if run.wrote {
        return r.error(UNKILLABLE);
    }
    if eval && !run.eval {
        return r.error(BUSY_FUNCTION);
    }
    if !eval && run.eval {
        return r.error(BUSY_EVAL);
    }
    run.killed = true;
    r.ok();
}

/// The answer to one request of another client while a script is busy.
pub fn answer(host: &dyn Host, shared: &Shared, s: &mut Session, a: &Args, r: &mut Reply) -> Answered {
    let mut b = [0u8; 32];
    let name = args::upper(a.get(0), &mut b).unwrap_or(b"").to_vec();
    let sub = |w: &str| a.len() == 2 && args::is(a.get(1), w);
    if !s.authenticated && !matches!(name.as_slice(), b"AUTH" | b"QUIT") {
        r.error(NOAUTH);
        return Answered::Done;
    }
    match name.as_slice() {
        b"QUIT" => {
            r.ok();
            return Answered::Close;
        }
        b"SCRIPT" if sub("KILL") => kill(shared, true, r),
        b"FUNCTION" if sub("KILL") => kill(shared, false, r),
        b"FUNCTION" if sub("STATS") => {
            let run = shared.borrow();
            if run.eval {
                r.error(BUSY_EVAL);
            } else {
                super::function_stats(Some(&run), run.counts, r);
            }
        }
        b"AUTH" if (2..=3).contains(&a.len()) => {
            let (user, pass) = if a.len() == 3 { (a.get(1), a.get(2)) } else { (&b"default"[..], a.get(1)) };
            match host.authenticate(&s.addr, user, pass) {
                Auth::Accepted => {
                    s.authenticated = true;
                    r.ok();
                }
                Auth::Refused => r.error(WRONGPASS),
                Auth::NoPassword => r.error(
                    "ERR AUTH <password> called without any password configured for the default user. \
                     Are you sure your configuration is correct?",
                ),
            }
        }
        b"MULTI" if a.len() == 1 => match s.multi {
            Some(_) => r.error("ERR MULTI calls can not be nested"),
            None => {
                s.multi = Some(Multi::default());
                r.ok();
            }
        },
        b"DISCARD" if a.len() == 1 => match s.multi.take() {
            Some(_) => {
                s.unwatch = true;
                r.ok();
            }
            None => r.error("ERR DISCARD without MULTI"),
        },
        b"UNWATCH" if a.len() == 1 => {
            s.unwatch = true;
            r.ok();
        }
        _ => {
            let busy = if shared.borrow().eval { BUSY_EVAL } else { BUSY_FUNCTION };
            if name == b"EXEC" {
                // Redis's rejection of an EXEC (in MULTI or not): the transaction is discarded,
                // its keys unwatched.
                s.multi = None;
                s.unwatch = true;
                r.error(&format!("EXECABORT Transaction discarded because of: {busy}"));
            } else {
                if let Some(m) = &mut s.multi {
                    m.failed = true;
                }
                r.error(busy);
            }
        }
    }
    Answered::Done
}
