//! What the fake does to its host when a scenario asks: leave a sleeper behind, report
//! its environment, probe what it can read, write and reach. The tests of isolation and
//! process handling read these reports.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use nix::sys::signal::{SigHandler, Signal};
use serde_json::{Map, Value, json};

use crate::stdio::log;

/// Starts a long sleeper child (in its own session with `setsid`, ignoring SIGTERM with
/// `ignore_sigterm`) and returns its pid: a process the agent leaves behind.
pub fn spawn_sleeper(setsid: bool, ignore_sigterm: bool, inherit_stdio: bool) -> Option<u32> {
    use std::os::unix::process::CommandExt;

    let mut cmd = sleeper_command();
    if !inherit_stdio {
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    }
    let handler = if ignore_sigterm {
        SigHandler::SigIgn
    } else {
        SigHandler::SigDfl
    };
    // SAFETY: setsid(2) and signal(2) are async-signal-safe, and the
    // closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if setsid {
                nix::unistd::setsid().map_err(io::Error::from)?;
            }
            nix::sys::signal::signal(Signal::SIGTERM, handler).map_err(io::Error::from)?;
            Ok(())
        });
    }
    match cmd.spawn() {
        Ok(mut child) => {
            let pid = child.id();
            // Reap it when it dies so a killed sleeper does not linger as
            // a zombie that still looks alive to kill(pid, 0).
            thread::spawn(move || {
                let _ = child.wait();
            });
            log(&format!(
                "spawned sleeper pid {pid} (setsid={setsid}, ignore_sigterm={ignore_sigterm})"
            ));
            Some(pid)
        }
        Err(e) => {
            log(&format!("cannot spawn the sleeper: {e}"));
            None
        }
    }
}

/// A path of an access report: relative ones are the session cwd's; `@closure` is the
/// directory of the `…/index.js` this process was started with (a pinned closure).
fn probe_path(session_cwd: Option<&Path>, path: &str) -> PathBuf {
    if path == "@closure" {
        let index = std::env::args().find(|a| a.ends_with("/index.js")).unwrap_or_default();
        return Path::new(&index).parent().map(Into::into).unwrap_or_default();
    }
    match session_cwd {
        Some(cwd) if !path.starts_with('/') => cwd.join(path),
        _ => path.into(),
    }
}

/// Plays a hostile agent (the `access_report` step) and writes what happened to `file`.
pub fn access_report(
    session_cwd: Option<&Path>,
    file: &str,
    read: &[String],
    write_into: &[String],
    cmdline_of: Option<&str>,
    api_address_file: Option<&str>,
) {
    let outcome = |result: io::Result<()>| match result {
        Ok(()) => "allowed".to_owned(),
        Err(e) => format!("denied: {:?}", e.kind()),
    };
    let reads: Map<String, Value> = read
        .iter()
        .map(|path| {
            (
                path.clone(),
                json!(outcome(File::open(probe_path(session_cwd, path)).map(drop))),
            )
        })
        .collect();
    let writes: Map<String, Value> = write_into
        .iter()
        .map(|dir| {
            let probe = probe_path(session_cwd, dir).join(format!(".probe-{}", std::process::id()));
            let result = File::create(&probe).map(drop);
            let _ = std::fs::remove_file(&probe);
            (dir.clone(), json!(outcome(result)))
        })
        .collect();
    // Our pid as this /proc numbers it (the host's /proc numbers processes in a
    // PID namespace by their host pids; a /proc of the namespace's own does not).
    let me = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse::<u32>().ok())
        .unwrap_or_else(std::process::id);
    let mut proc_pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .collect();
    proc_pids.sort_unstable();
    let cmdline_of = cmdline_of.map(|pid_file| {
        let pid = std::fs::read_to_string(probe_path(session_cwd, pid_file)).unwrap_or_default();
        let pid = pid.trim();
        json!({"pid": pid, "result": outcome(File::open(format!("/proc/{pid}/cmdline")).map(drop))})
    });
    let others: Map<String, Value> = proc_pids
        .iter()
        .copied()
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("fake-cursor"))
        })
        .map(|pid| {
            let result = std::fs::read(format!("/proc/{pid}/environ")).map(drop);
            (pid.to_string(), json!(outcome(result)))
        })
        .collect();
    let report = json!({
        "uid": nix::unistd::getuid().as_raw(),
        "gid": nix::unistd::getgid().as_raw(),
        "read": reads,
        "write_into": writes,
        "other_agents_environ": others,
        "proc_pids": proc_pids,
        "cmdline_of": cmdline_of,
        "service_api": api_address_file.map(|f| probe_api(std::fs::read_to_string(probe_path(session_cwd, f)).unwrap_or_default().trim())),
    });
    let path = match session_cwd {
        Some(cwd) => cwd.join(file),
        None => file.into(),
    };
    if let Err(e) = std::fs::write(&path, report.to_string()) {
        log(&format!("cannot write the access report to {}: {e}", path.display()));
    }
}

/// The process's environment, ids and session (the `env_report` step), also written to
/// `file` when one is named: relative to the session's workspace, or to `$HOME` as `~/…`
/// (a CLI caching what it was handed in its own state).
pub fn env_report(session_cwd: Option<&Path>, session_id: &str, file: Option<&str>) -> Value {
    let env: Map<String, Value> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                Value::String(v.to_string_lossy().into_owned()),
            )
        })
        .collect();
    let argv: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let cwd = std::env::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let report = json!({
        "env": env,
        "argv": argv,
        "uid": nix::unistd::getuid().as_raw(),
        "gid": nix::unistd::getgid().as_raw(),
        "cwd": cwd,
        "session_cwd": session_cwd.map(|p| p.to_string_lossy().into_owned()),
        // Cursor reads user-level MCP servers from here: a private home has none.
        "user_mcp_config_visible": std::env::var_os("HOME")
            .is_some_and(|home| std::path::Path::new(&home).join(".cursor/mcp.json").exists()),
        "session_id": session_id,
        "pid": std::process::id(),
        "ppid": nix::unistd::getppid().as_raw(),
        "pgid": nix::unistd::getpgrp().as_raw(),
        "sid": nix::unistd::getsid(None).map(|p| p.as_raw()).ok(),
    });
    // A relative file is the session's: inside the workspace, like Cursor's own paths.
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let file = file.map(|f| match (f.strip_prefix("~/"), &home, session_cwd) {
        (Some(rest), Some(home), _) => home.join(rest),
        (_, _, Some(cwd)) => cwd.join(f),
        _ => f.into(),
    });
    if let Some(file) = file.as_ref().map(|f| f.display().to_string())
        && let Err(e) = std::fs::write(&file, report.to_string())
    {
        log(&format!("cannot write the env report to {file}: {e}"));
    }
    report
}

/// A command that sleeps "forever" without relying on `$PATH`.
fn sleeper_command() -> Command {
    for path in ["/bin/sleep", "/usr/bin/sleep"] {
        if std::path::Path::new(path).exists() {
            let mut cmd = Command::new(path);
            cmd.arg("100000");
            return cmd;
        }
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| "fake-cursor".into());
    let mut cmd = Command::new(exe);
    cmd.arg("--sleep-forever");
    cmd
}

/// Tries to speak HTTP/2 — gRPC's transport — to the service's API at `address`: `served`
/// when the server answers the connection preface, `closed…` when it hangs up unread.
fn probe_api(address: &str) -> String {
    use std::io::{Read, Write};
    let Ok(address) = address.parse::<std::net::SocketAddr>() else {
        return format!("no address: {address:?}");
    };
    let mut stream = match std::net::TcpStream::connect_timeout(&address, Duration::from_secs(2)) {
        Ok(stream) => stream,
        Err(e) => return format!("unreachable: {:?}", e.kind()),
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(3)));
    // The client connection preface, then an empty SETTINGS frame.
    let _ = stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00");
    let mut frame = [0u8; 9];
    match stream.read(&mut frame) {
        Ok(0) => "closed".into(),
        Ok(_) => "served".into(),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            "no answer".into()
        }
        Err(e) => format!("closed: {:?}", e.kind()),
    }
}
