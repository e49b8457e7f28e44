//! The structs `mojim_ucx::sys` declares by hand have the sizes and field offsets of UCX's own
//! headers: a C program built against `ucp/api/ucp.h` prints them, and they are compared here.
//! Needs gcc, pkg-config and UCX's headers (Debian: libucx-dev); without them the test skips,
//! except under MOJIM_TEST_STRICT=1 (scripts/test), where it fails.

use mojim_ucx::sys::*;
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

/// (C name, Rust size, [(field, Rust offset)]) of a declared struct.
type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

/// Sizes of the scalar types and enums the declarations use (UCX packs `ucs_status_t` into a
/// byte: a wrong width here corrupts every returned status).
fn scalar_sizes() -> Vec<(&'static str, usize)> {
    vec![
        ("ucs_status_t", size_of::<ucs_status_t>()),
        ("ucs_thread_mode_t", size_of::<libc::c_int>()),
        ("ucp_err_handling_mode_t", size_of::<libc::c_int>()),
        ("ucs_memory_type_t", size_of::<libc::c_int>()),
        ("ucp_datatype_t", size_of::<u64>()),
        ("ucs_status_ptr_t", size_of::<ucs_status_ptr_t>()),
    ]
}

/// The layouts of every declared struct.
fn rust_layouts() -> Vec<Layout> {
    macro_rules! layout {
        ($c:literal, $t:ty, [$($f:ident),*]) => {
            ($c, size_of::<$t>(), vec![$((stringify!($f), offset_of!($t, $f))),*])
        };
    }
    vec![
        layout!(
            "ucp_params_t",
            ucp_params_t,
            [
                field_mask,
                features,
                request_size,
                request_init,
                request_cleanup,
                tag_sender_mask,
                mt_workers_shared,
                estimated_num_eps,
                estimated_num_ppn,
                name
            ]
        ),
        layout!("ucs_cpu_set_t", ucs_cpu_set_t, [ucs_bits]),
        layout!(
            "ucp_worker_params_t",
            ucp_worker_params_t,
            [
                field_mask,
                thread_mode,
                cpu_mask,
                events,
                user_data,
                event_fd,
                flags,
                name,
                am_alignment,
                client_id
            ]
        ),
        layout!("ucs_sock_addr_t", ucs_sock_addr_t, [addr, addrlen]),
        layout!("ucp_listener_accept_handler_t", ucp_listener_accept_handler_t, [cb, arg]),
        layout!("ucp_listener_conn_handler_t", ucp_listener_conn_handler_t, [cb, arg]),
        layout!(
            "ucp_listener_params_t",
            ucp_listener_params_t,
            [field_mask, sockaddr, accept_handler, conn_handler]
        ),
        layout!("ucp_listener_attr_t", ucp_listener_attr_t, [field_mask, sockaddr]),
        layout!("ucp_err_handler_t", ucp_err_handler_t, [cb, arg]),
        layout!(
            "ucp_ep_params_t",
            ucp_ep_params_t,
            [
                field_mask,
                address,
                err_mode,
                err_handler,
                user_data,
                flags,
                sockaddr,
                conn_request,
                name,
                local_sockaddr
            ]
        ),
        layout!(
            "ucp_mem_map_params_t",
            ucp_mem_map_params_t,
            [field_mask, address, length, flags, prot, memory_type]
        ),
        layout!(
            "ucp_request_param_t",
            ucp_request_param_t,
            [
                op_attr_mask,
                flags,
                request,
                cb,
                datatype,
                user_data,
                reply_buffer,
                memory_type,
                recv_info,
                memh
            ]
        ),
        layout!("ucp_am_handler_param_t", ucp_am_handler_param_t, [field_mask, id, flags, cb, arg]),
        layout!("ucp_am_recv_param_t", ucp_am_recv_param_t, [recv_attr, reply_ep]),
    ]
}

/// The C program printing `name size` and `name.field offset` lines, and the constants.
fn c_program(layouts: &[Layout]) -> String {
    let mut c =
        String::from("#include <stdio.h>\n#include <stddef.h>\n#include <ucp/api/ucp.h>\nint main(void) {\n");
    for (name, _, fields) in layouts {
        c += &format!("  printf(\"{name} %zu\\n\", sizeof({name}));\n");
        for (f, _) in fields {
            c += &format!("  printf(\"{name}.{f} %zu\\n\", offsetof({name}, {f}));\n");
        }
    }
    for (name, _) in scalar_sizes() {
        c += &format!("  printf(\"{name} %zu\\n\", sizeof({name}));\n");
    }
    for (name, _) in constants() {
        c += &format!("  printf(\"{name} %lld\\n\", (long long)({name}));\n");
    }
    c += "  printf(\"UCP_API_MAJOR %d\\nUCP_API_MINOR %d\\n\", UCP_API_MAJOR, UCP_API_MINOR);\n  return 0;\n}\n";
    c
}

fn constants() -> Vec<(&'static str, i64)> {
    macro_rules! k {
        ($($n:ident),*) => { vec![$((stringify!($n), $n as i64)),*] };
    }
    k!(
        UCS_OK,
        UCS_INPROGRESS,
        UCS_ERR_BUSY,
        UCS_ERR_LAST,
        UCP_PARAM_FIELD_FEATURES,
        UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        UCP_FEATURE_RMA,
        UCP_FEATURE_WAKEUP,
        UCP_FEATURE_AM,
        UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        UCP_WORKER_PARAM_FIELD_EVENTS,
        UCS_THREAD_MODE_SERIALIZED,
        UCP_WAKEUP_RMA,
        UCP_WAKEUP_TX,
        UCP_WAKEUP_RX,
        UCP_LISTENER_PARAM_FIELD_SOCK_ADDR,
        UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        UCP_LISTENER_ATTR_FIELD_SOCKADDR,
        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        UCP_EP_PARAM_FIELD_ERR_HANDLER,
        UCP_EP_PARAM_FIELD_SOCK_ADDR,
        UCP_EP_PARAM_FIELD_FLAGS,
        UCP_EP_PARAM_FIELD_CONN_REQUEST,
        UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
        UCP_ERR_HANDLING_MODE_PEER,
        UCP_EP_CLOSE_FLAG_FORCE,
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS,
        UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        UCP_OP_ATTR_FIELD_FLAGS,
        UCP_AM_HANDLER_PARAM_FIELD_ID,
        UCP_AM_HANDLER_PARAM_FIELD_CB,
        UCP_AM_HANDLER_PARAM_FIELD_ARG,
        UCP_AM_RECV_ATTR_FLAG_RNDV,
        UCP_AM_SEND_FLAG_EAGER
    )
}

fn tools_here() -> bool {
    let ok = Command::new("pkg-config").args(["--exists", "ucx"]).status().is_ok_and(|s| s.success())
        && Command::new("gcc").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok && std::env::var_os("MOJIM_TEST_STRICT").is_some() {
        panic!("the layout check needs gcc, pkg-config and UCX's headers: apt-get install gcc pkg-config libucx-dev");
    }
    ok
}

#[test]
fn declared_structs_match_the_c_headers() {
    if !tools_here() {
        eprintln!("skipped: no gcc, pkg-config or libucx-dev");
        return;
    }
    let layouts = rust_layouts();
    let dir = std::env::temp_dir().join(format!("mojim-ucx-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, c_program(&layouts)).unwrap();
    let cflags = Command::new("pkg-config").args(["--cflags", "ucx"]).output().unwrap();
    let cflags = String::from_utf8(cflags.stdout).unwrap();
    let built =
        Command::new("gcc").args(cflags.split_whitespace()).arg("-o").arg(&exe).arg(&src).output().unwrap();
    let out = Command::new(&exe).output();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(built.status.success(), "gcc failed: {}", String::from_utf8_lossy(&built.stderr));
    let out = String::from_utf8(out.unwrap().stdout).unwrap();
    let c: BTreeMap<&str, i64> = out
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k, v.parse().unwrap())
        })
        .collect();
    let mut wrong = Vec::new();
    for (name, size, fields) in &layouts {
        if c[name] != *size as i64 {
            wrong.push(format!("sizeof({name}): C {} Rust {size}", c[name]));
        }
        for (f, off) in fields {
            let key = format!("{name}.{f}");
            if c[key.as_str()] != *off as i64 {
                wrong.push(format!("offsetof({name}, {f}): C {} Rust {off}", c[key.as_str()]));
            }
        }
    }
    for (name, size) in scalar_sizes() {
        if c[name] != size as i64 {
            wrong.push(format!("sizeof({name}): C {} Rust {size}", c[name]));
        }
    }
    for (name, v) in constants() {
        if c[name] != v {
            wrong.push(format!("{name}: C {} Rust {v}", c[name]));
        }
    }
    assert_eq!((c["UCP_API_MAJOR"], c["UCP_API_MINOR"]), (API_MAJOR as i64, API_MINOR as i64));
    assert!(wrong.is_empty(), "declarations differ from ucp.h:\n{}", wrong.join("\n"));
}
