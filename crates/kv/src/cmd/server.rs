//! Connection and server commands: PING ECHO INFO CLIENT SELECT HELLO COMMAND CONFIG WAIT TIME
//! SENTINEL.

use super::args::{int, is, Args};
use super::spec::{spec, Group, Spec, A, ADM, NO};
use super::{show, Auth, Cx, Session, NOT_INT, SYNTAX, WRONGPASS};
use crate::resp::{Proto, Reply};
use crate::store::{Mem, StoreError};
use std::fmt::Write as _;

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("ACL", -2, &["sentinel"], NO, Group::Server),
    spec("AUTH", -2, &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], NO, Group::Server),
    spec("CLIENT", -2, &["admin", "noscript", "loading", "stale"], NO, Group::Server),
    spec("COMMAND", -1, &["loading", "stale"], NO, Group::Server),
    spec("CONFIG", -2, ADM, NO, Group::Server),
    spec("ECHO", 2, A, NO, Group::Server),
    spec("HELLO", -1, &["noscript", "loading", "stale", "fast", "no_auth"], NO, Group::Server),
    spec("INFO", -1, &["loading", "stale"], NO, Group::Server),
    spec("PING", -1, A, NO, Group::Server),
    spec("SELECT", 2, &["loading", "stale", "fast"], NO, Group::Server),
    spec("SENTINEL", -2, &["admin", "noscript", "loading", "stale"], NO, Group::Server),
    spec("SWAPDB", 3, &["write", "fast"], NO, Group::Server),
    spec("TIME", 1, &["loading", "stale", "fast"], NO, Group::Server),
    spec("WAIT", 3, &["noscript"], NO, Group::Server),
];

/// The Redis version `mojim kv` answers to (HELLO, INFO): the command set and replies follow
/// Redis 7.0.
pub const REDIS_VERSION: &str = "7.0.0";

pub(super) fn run<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    spec: &Spec,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    match spec.name {
        // A RESP2 client with subscriptions is answered as Redis answers it there.
        "PING" if a.len() <= 2 && s.subs.any() && s.proto == Proto::Resp2 => {
            r.array(2);
            r.bulk(b"pong");
            r.bulk(if a.len() == 2 { a.get(1) } else { b"" });
        }
        "PING" => match a.len() {
            1 => r.simple(b"PONG"),
            2 => r.bulk(a.get(1)),
            _ => r.error("ERR wrong number of arguments for 'ping' command"),
        },
        "ECHO" => r.bulk(a.get(1)),
        // Cluster mode has database 0 alone, as Redis Cluster.
        "SELECT" if cx.cluster.is_some() => match super::args::c_int(a.get(1), None) {
            Ok(0) => {
                s.db = 0;
                r.ok()
            }
            Ok(_) => r.error("ERR SELECT is not allowed in cluster mode"),
            Err(e) => r.error(&e),
        },
        "SWAPDB" if cx.cluster.is_some() => r.error("ERR SWAPDB is not allowed in cluster mode"),
        "SELECT" => match super::args::db_index(a.get(1), cx.databases()) {
            Ok(db) => {
                s.db = db;
                r.ok()
            }
            Err(e) => r.error(&e),
        },
        // Redis reads both numbers before it checks either against the databases.
        "SWAPDB" => {
            let first = super::args::c_int(a.get(1), Some("ERR invalid first DB index"));
            let second = super::args::c_int(a.get(2), Some("ERR invalid second DB index"));
            let n = cx.databases() as i32;
            match (first, second) {
                (Ok(x), Ok(y)) if (0..n).contains(&x) && (0..n).contains(&y) => {
                    // Watched keys that exist in either database change.
                    super::keys::touch_existing(cx, &[x as usize, y as usize])?;
                    cx.store.swap_db(x as usize, y as usize);
                    r.ok();
                }
                (Ok(_), Ok(_)) => r.error("ERR DB index is out of range"),
                (Err(e), _) | (_, Err(e)) => r.error(&e),
            }
        }
        "TIME" => {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            r.array(2);
            r.bulk(t.as_secs().to_string().as_bytes());
            r.bulk(t.subsec_micros().to_string().as_bytes());
        }
        "WAIT" => match (int(a.get(1)), int(a.get(2))) {
            (Some(_), Some(t)) if t < 0 => r.error("ERR timeout is negative"),
            // Every write answered so far is in the mirror's log already: nothing to wait for.
            (Some(_), Some(_)) => r.int(cx.host.replication().durable_replicas),
            _ => r.error(NOT_INT),
        },
        "INFO" => info(cx, a, r),
        "CLIENT" => super::client::client(cx, s, a, r),
        "ACL" => super::acl::run(cx, s, a, r)?,
        "AUTH" => auth(cx, s, a, r)?,
        "HELLO" => hello(cx, s, a, r)?,
        "COMMAND" => command(a, r),
        "CONFIG" => super::config::config(cx, a, r),
        "SENTINEL" => sentinel(cx, s, a, r),
        "LATENCY" | "MONITOR" | "SLOWLOG" => super::observe::run(cx, s, a, r),
        other => unreachable!("{other} is in the table but has no code"),
    }
    Ok(())
}

fn info<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) {
    // No section named: Redis's default ones; `all` and `everything` add the per command ones.
    let all = a.from(1).any(|x| is(x, "ALL") || is(x, "EVERYTHING"));
    let default = a.len() == 1 || a.from(1).any(|x| is(x, "DEFAULT"));
    let want = |name: &str| all || default || a.from(1).any(|x| is(x, name));
    let want_all = |name: &str| all || a.from(1).any(|x| is(x, name));
    let mut t = String::new();
    let host = cx.host;
    let st = host.stats();
    if want("SERVER") {
        // The plaintext port, 0 when clients may connect only over TLS (as Redis with `port 0`).
        let listen = host.listen_addr();
        let port = if host.plaintext() { listen.rsplit(':').next().unwrap_or("0") } else { "0" };
        let _ = write!(
            t,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\n\
             redis_build_id:0\r\nmojim_version:{}\r\nredis_mode:{}\r\nos:{} {}\r\narch_bits:64\r\n\
             multiplexing_api:epoll\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{port}\r\n\
             server_time_usec:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nexecutable:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            if cx.cluster.is_some() { "cluster" } else { "standalone" },
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            host.run_id(),
            cx.now_ms * 1000,
            st.uptime_s,
            st.uptime_s / 86400,
            std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default()
        );
    }
    if want("CLIENTS") {
        let _ = write!(
            t,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\ntracking_clients:0\r\n\r\n",
            host.connected_clients(),
            host.fixed_setting("maxclients"),
            st.blocked_clients,
        );
    }
    if want("MEMORY") {
        let g = cx.store.geometry();
        let used = cx.store.used_bytes();
        let rss = super::observe::procstat::rss_bytes();
        let _ = write!(
            t,
            "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\n\
             used_memory_rss_human:{}\r\nused_memory_peak:{}\r\nused_memory_peak_human:{}\r\n\
             used_memory_heap_top:{}\r\nmaxmemory:{}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:noeviction\r\n\
             mem_allocator:mojim-region\r\nregion_size:{}\r\nmojim_bucket_array_bytes:{}\r\nlazyfree_pending_objects:{}\r\n",
            human(used),
            human(rss),
            st.used_memory_peak.max(used),
            human(st.used_memory_peak.max(used)),
            cx.store.heap_top_bytes(),
            g.heap_end - g.heap_off,
            human(g.heap_end - g.heap_off),
            g.size,
            // The key table, outside the heap (and so outside used_memory): 8 bytes a bucket,
            // as many buckets as the region's size gives (FORMAT.md §11).
            8 * g.buckets,
            cx.store.lazyfree_pending()
        );
        super::scripting::info_memory(host, &mut t);
        t.push_str("\r\n");
    }
    if want("PERSISTENCE") {
        t.push_str(
            "# Persistence\r\nloading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:0\r\n\
             rdb_bgsave_in_progress:0\r\nrdb_last_bgsave_status:ok\r\naof_enabled:0\r\n\
             aof_rewrite_in_progress:0\r\naof_last_bgrewrite_status:ok\r\naof_last_write_status:ok\r\n\r\n",
        );
    }
    if want("STATS") {
        let pubsub = host.pubsub_counts();
        let _ = write!(
            t,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
             instantaneous_ops_per_sec:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\n\
             instantaneous_input_kbps:{:.2}\r\ninstantaneous_output_kbps:{:.2}\r\nrejected_connections:{}\r\n\
             expired_keys:{}\r\nevicted_keys:0\r\nevicted_clients:0\r\ntotal_forks:0\r\nlatest_fork_usec:0\r\n\
             total_error_replies:{}\r\nmojim_groups_sent:{}\r\nmojim_protocol_errors:{}\r\nacl_access_denied_auth:{}\r\n\
             client_output_buffer_limit_disconnections:{}\r\nclient_output_limit_disconnections:{}\r\n\
             pubsub_channels:{}\r\npubsub_patterns:{}\r\npubsubshard_channels:{}\r\nlazyfreed_objects:{}\r\n\r\n",
            st.connections,
            st.commands,
            st.ops_per_sec,
            st.net_input_bytes,
            st.net_output_bytes,
            st.input_kbps,
            st.output_kbps,
            st.rejected_connections,
            st.expired_keys,
            cx.errors.total(),
            st.groups,
            st.protocol_errors,
            st.auth_failures,
            st.output_limit_closes,
            st.output_limit_closes,
            pubsub.0,
            pubsub.1,
            pubsub.2,
            st.lazyfreed_objects
        );
    }
    if want("REPLICATION") {
        let rep = host.replication();
        let _ = write!(
            t,
            "# Replication\r\nrole:master\r\nconnected_slaves:{}\r\nmaster_repl_offset:{}\r\n\
             mirror:{}\r\nmirror_state:{}\r\nmirror_mode:{}\r\nmirror_lag_groups:{}\r\nmirror_acked_seq:{}\r\n\
             epoch:{}\r\n\r\n",
            rep.durable_replicas,
            rep.acked_seq,
            rep.mirror,
            rep.state,
            rep.mode,
            rep.lag_groups,
            rep.acked_seq,
            rep.epoch
        );
    }
    if want("CPU") {
        super::observe::procstat::Cpu::now().write_info(&mut t);
    }
    if want_all("COMMANDSTATS") {
        cx.telemetry.commands.write_commandstats(&mut t);
    }
    if want("ERRORSTATS") {
        cx.errors.write_info(&mut t);
    }
    if want_all("LATENCYSTATS") {
        cx.telemetry.commands.write_latencystats(&mut t);
    }
    if want("CLUSTER") {
        let _ = write!(t, "# Cluster\r\ncluster_enabled:{}\r\n\r\n", u8::from(cx.cluster.is_some()));
    }
    if want("KEYSPACE") {
        t.push_str("# Keyspace\r\n");
        // Cluster mode has database 0 alone (a slot move's stage is not a client's database).
        let shown = if cx.cluster.is_some() { 1 } else { cx.databases() };
        for db in 0..shown {
            let keys = cx.store.db_keys(db);
            if keys > 0 {
                let _ = write!(t, "db{db}:keys={keys},expires={},avg_ttl=0\r\n", cx.store.db_expires(db));
            }
        }
    }
    r.bulk(t.as_bytes());
}

/// Bytes as Redis writes them for people (`1.50M`).
fn human(n: u64) -> String {
    let units = ["B", "K", "M", "G", "T", "P"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n}B")
    } else {
        format!("{v:.2}{}", units[u])
    }
}

/// `AUTH [username] password`, as the ACL users say (`acl/mod.rs`; the `default` user's
/// password is `[kv] password` while it is set). A failure leaves an authenticated client
/// authenticated as it was, as in Redis.
fn auth<M: Mem>(cx: &mut Cx<M>, s: &mut Session, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (user, pass) = match a.len() {
        2 => (&b"default"[..], a.get(1)),
        3 => (a.get(1), a.get(2)),
        _ => {
            r.error(SYNTAX);
            return Ok(());
        }
    };
    if a.len() == 2 && super::acl::default_needs_no_password(cx)? {
        r.error(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure \
             your configuration is correct?",
        );
        return Ok(());
    }
    match super::acl::authenticate(cx, s, user, pass, a.get(0))? {
        Auth::Accepted => {
            s.authenticated = true;
            s.user = String::from_utf8_lossy(user).into_owned();
            r.ok();
        }
        _ => r.error(WRONGPASS),
    }
    Ok(())
}

fn hello<M: Mem>(cx: &mut Cx<M>, s: &mut Session, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    hello_inner(cx, s, a, r)?;
    Ok(())
}

fn hello_inner<M: Mem>(cx: &mut Cx<M>, s: &mut Session, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let mut i = 1;
    let mut proto = s.proto;
    if a.len() > 1 {
        match int(a.get(1)) {
            Some(2) => proto = Proto::Resp2,
            Some(3) => proto = Proto::Resp3,
            Some(_) => {
                r.error("NOPROTO unsupported protocol version");
                return Ok(());
            }
            None => {
                r.error("ERR Protocol version is not an integer or out of range");
                return Ok(());
            }
        }
        i = 2;
    }
    let (mut name, mut creds) = (None, None);
    while i < a.len() {
        if is(a.get(i), "AUTH") && i + 2 < a.len() {
            creds = Some((a.get(i + 1), a.get(i + 2)));
            i += 3;
        } else if is(a.get(i), "SETNAME") && i + 1 < a.len() {
            let n = a.get(i + 1);
            if n.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
                r.error("ERR Client names cannot contain spaces, newlines or special characters.");
                return Ok(());
            }
            name = Some(n.to_vec());
            i += 2;
        } else {
            r.error(&format!("ERR Syntax error in HELLO option '{}'", show(a.get(i), 64)));
            return Ok(());
        }
    }
    // Nothing changes (protocol, name) unless the whole command is accepted.
    match creds {
        Some((user, pass)) => match super::acl::authenticate(cx, s, user, pass, a.get(0))? {
            Auth::Accepted => {
                s.authenticated = true;
                s.user = String::from_utf8_lossy(user).into_owned();
            }
            _ => {
                r.error(WRONGPASS);
                return Ok(());
            }
        },
        None if !s.authenticated => {
            r.error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO \
                 <proto> AUTH <user> <pass> option can be used to authenticate the client and select the \
                 RESP protocol version at the same time",
            );
            return Ok(());
        }
        None => {}
    }
    s.proto = proto;
    r.proto = s.proto;
    if let Some(n) = name {
        s.name = (!n.is_empty()).then_some(n);
    }
    r.map(7);
    r.bulk(b"server");
    r.bulk(b"redis");
    r.bulk(b"version");
    r.bulk(REDIS_VERSION.as_bytes());
    r.bulk(b"proto");
    r.int(if s.proto == Proto::Resp3 { 3 } else { 2 });
    r.bulk(b"id");
    r.int(s.id as i64);
    r.bulk(b"mode");
    r.bulk(if cx.cluster.is_some() { b"cluster" } else { b"standalone" });
    r.bulk(b"role");
    r.bulk(b"master");
    r.bulk(b"modules");
    r.array(0);
    Ok(())
}

/// The keys of a command whose table entry cannot place them (`movablekeys`), added to `keys`
/// for `COMMAND GETKEYS`, as Redis finds them: those after a count (`LMPOP numkeys key...`,
/// `ZUNIONSTORE dst numkeys key...`), SORT's `STORE` destination. `None`: the count is not a
/// number of keys the arguments hold.
pub(super) fn movable_keys<'a>(name: &str, a: &Args<'a>, keys: &mut Vec<&'a [u8]>) -> Option<()> {
    let at = match name {
        "LMPOP" | "SINTERCARD" | "ZMPOP" | "ZUNION" | "ZINTER" | "ZDIFF" | "ZINTERCARD" => 1,
        "BLMPOP" | "BZMPOP" | "ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE" => 2,
        "SORT" | "SORT_RO" => {
            // Redis's own scan of SORT's options: LIMIT takes two arguments, GET and BY one.
            let mut i = 2;
            let mut store = None;
            while i < a.len() {
                let o = a.get(i);
                if is(o, "LIMIT") {
                    i += 2;
                } else if is(o, "GET") || is(o, "BY") {
                    i += 1;
                } else if is(o, "STORE") && i + 1 < a.len() {
                    store = Some(a.get(i + 1));
                    i += 1;
                }
                i += 1;
            }
            keys.extend(store);
            return Some(());
        }
        _ => return Some(()),
    };
    let n = int(a.get(at)).filter(|&n| n > 0 && (n as u64) < (a.len() - at) as u64)?;
    keys.extend((at + 1..=at + n as usize).map(|i| a.get(i)));
    Some(())
}

fn command_info(spec: &Spec, r: &mut Reply) {
    r.array(10);
    r.bulk(spec.name.to_ascii_lowercase().as_bytes());
    r.int(i64::from(spec.arity));
    r.set(spec.flags.len());
    for f in spec.flags {
        r.simple(f.as_bytes());
    }
    r.int(i64::from(spec.first_key));
    r.int(i64::from(spec.last_key));
    r.int(i64::from(spec.step));
    let cats = super::acl::categories(&spec.name.to_ascii_lowercase());
    r.set(cats.len());
    for c in cats {
        r.simple(c.as_bytes());
    }
    r.set(0);
    r.array(0);
    r.array(0);
}

fn command(a: &Args, r: &mut Reply) {
    if a.len() == 1 {
        r.array(super::SPECS.len());
        for s in super::SPECS.iter() {
            command_info(s, r);
        }
        return;
    }
    let sub = a.get(1);
    match () {
        _ if is(sub, "COUNT") => r.int(super::SPECS.len() as i64),
        _ if is(sub, "LIST") => {
            // COMMAND LIST [FILTERBY PATTERN p | ACLCAT c | MODULE m]
            let pattern = match a.len() {
                2 => None,
                5 if is(a.get(2), "FILTERBY") && is(a.get(3), "PATTERN") => {
                    Some(a.get(4).to_ascii_lowercase())
                }
                // An unknown category lists nothing, as in Redis.
                5 if is(a.get(2), "FILTERBY") && is(a.get(3), "ACLCAT") => {
                    let names = super::acl::commands_of(a.get(4)).unwrap_or_default();
                    r.array(names.len());
                    for n in names {
                        r.bulk(n.as_bytes());
                    }
                    return;
                }
                // No modules: nothing matches.
                5 if is(a.get(2), "FILTERBY") && is(a.get(3), "MODULE") => {
                    return r.array(0);
                }
                _ => return r.error(super::SYNTAX),
            };
            let names: Vec<String> = super::SPECS
                .iter()
                .map(|s| s.name.to_ascii_lowercase())
                .filter(|n| pattern.as_ref().is_none_or(|p| super::glob::matches(p, n.as_bytes())))
                .collect();
            r.array(names.len());
            for n in names {
                r.bulk(n.as_bytes());
            }
        }
        _ if is(sub, "GETKEYS") => {
            let mut b = [0u8; 32];
            let Some(spec) = super::args::upper(a.get(2), &mut b).and_then(super::find_spec) else {
                return r.error("ERR Invalid command specified");
            };
            let argc = a.len() as i32 - 2;
            if (spec.arity > 0 && argc != spec.arity) || (spec.arity < 0 && argc < -spec.arity) {
                return r.error("ERR Invalid number of arguments specified for command");
            }
            let rest: Vec<Vec<u8>> = a.from(2).map(|x| x.to_vec()).collect();
            let args = super::Args::Owned(&rest);
            if let Some(keys) = super::scripting::declared_keys(spec, &args) {
                r.array(keys.len());
                for k in keys {
                    r.bulk(k);
                }
                return;
            }
            let mut keys: Vec<&[u8]> = super::key_args(spec, &args).collect();
            if movable_keys(spec.name, &args, &mut keys).is_none() {
                return r.error("ERR Invalid arguments specified for command");
            }
            if keys.is_empty() {
                return r.error("ERR The command has no key arguments");
            }
            r.array(keys.len());
            for k in keys {
                r.bulk(k);
            }
        }
        _ if is(sub, "INFO") => {
            r.array(a.len() - 2);
            for n in a.from(2) {
                let mut b = [0u8; 32];
                match super::args::upper(n, &mut b).and_then(super::find_spec) {
                    Some(s) => command_info(s, r),
                    None => r.null_array(),
                }
            }
        }
        // No documentation to offer: an empty map (redis-cli then gives no hints).
        _ if is(sub, "DOCS") => r.map(0),
        _ => r.error(&format!("ERR unknown subcommand '{}'. Try COMMAND HELP.", show(sub, 64))),
    }
}

fn master_fields(sn: &super::Sentinel, others: usize, r: &mut Reply) {
    let (host, port) = &sn.master;
    // A master that may not serve reports itself down (subjectively and objectively): clients
    // such as redis-py's Sentinel then skip it and ask the next server.
    let flags = if sn.serving { "master" } else { "master,s_down,o_down,disconnected" };
    let fields: [(&str, String); 12] = [
        ("name", sn.name.clone()),
        ("ip", host.clone()),
        ("port", port.to_string()),
        ("runid", String::new()),
        ("flags", flags.into()),
        ("link-pending-commands", "0".into()),
        ("link-refcount", "1".into()),
        ("last-ping-sent", "0".into()),
        ("num-slaves", "0".into()),
        ("num-other-sentinels", others.to_string()),
        ("quorum", "1".into()),
        ("failover-timeout", "0".into()),
    ];
    r.map(fields.len());
    for (k, v) in fields {
        r.bulk(k.as_bytes());
        r.bulk(v.as_bytes());
    }
}

/// The Sentinel subset clients use. A client connected over TLS is told the master's TLS
/// address, one in the clear its plaintext address: each follows with the connection it has.
fn sentinel<M: Mem>(cx: &mut Cx<M>, s: &Session, a: &Args, r: &mut Reply) {
    let sub = a.get(1);
    let mut sn = cx.host.sentinel();
    if let Some(tls) = sn.master_tls.take().filter(|_| s.tls) {
        sn.master = tls;
    }
    let known = |n: &[u8]| n == sn.name.as_bytes();
    let me = cx.host.listen_addr();
    let others: Vec<&(String, u16)> = sn.sentinels.iter().filter(|(h, p)| format!("{h}:{p}") != me).collect();
    match () {
        _ if is(sub, "GET-MASTER-ADDR-BY-NAME") && a.len() == 3 => {
            // Not serving (cut off from its mirror, or replaced): it knows no master to name.
            if known(a.get(2)) && sn.serving {
                r.array(2);
                r.bulk(sn.master.0.as_bytes());
                r.bulk(sn.master.1.to_string().as_bytes());
            } else {
                r.null_array();
            }
        }
        _ if is(sub, "MASTERS") && a.len() == 2 => {
            r.array(1);
            master_fields(&sn, others.len(), r);
        }
        _ if is(sub, "MASTER") && a.len() == 3 => {
            if known(a.get(2)) {
                master_fields(&sn, others.len(), r);
            } else {
                r.error("ERR No such master with that name");
            }
        }
        _ if (is(sub, "SENTINELS") || is(sub, "SLAVES") || is(sub, "REPLICAS")) && a.len() == 3 => {
            if !known(a.get(2)) {
                return r.error("ERR No such master with that name");
            }
            if !is(sub, "SENTINELS") {
                return r.array(0);
            }
            r.array(others.len());
            for (h, p) in others {
                r.map(4);
                r.bulk(b"name");
                r.bulk(format!("{h}:{p}").as_bytes());
                r.bulk(b"ip");
                r.bulk(h.as_bytes());
                r.bulk(b"port");
                r.bulk(p.to_string().as_bytes());
                r.bulk(b"flags");
                r.bulk(b"sentinel");
            }
        }
        _ => r.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try SENTINEL HELP.",
            show(sub, 64)
        )),
    }
}
