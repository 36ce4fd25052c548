//! The sessions this fake "stores", as Cursor keeps them under its data directory, so
//! that `session/load` and `session/list` see what an earlier process created.

use serde_json::{Value, json};

use crate::stdio::log;

/// Where Cursor keeps its sessions: under its data directory (a private home's, when
/// the runner launched it), so a session can be loaded only by a process with that home.
fn sessions_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("CURSOR_DATA_DIR").map(|dir| std::path::PathBuf::from(dir).join("sessions"))
}

pub fn store_session(session_id: &str, cwd: &str) {
    let Some(dir) = sessions_dir() else { return };
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join(format!("{session_id}.json")), json!({"cwd": cwd}).to_string()));
    if let Err(e) = written {
        log(&format!("cannot store session {session_id}: {e}"));
    }
}

pub fn stored_session(session_id: &str) -> bool {
    !session_id.is_empty()
        && !session_id.contains('/')
        && sessions_dir().is_some_and(|dir| dir.join(format!("{session_id}.json")).is_file())
}

pub fn listed_sessions(cwd: Option<&str>) -> Vec<Value> {
    let Some(entries) = sessions_dir().and_then(|dir| std::fs::read_dir(dir).ok()) else {
        return Vec::new();
    };
    let mut sessions: Vec<Value> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let id = name.strip_suffix(".json")?.to_owned();
            let stored: Value = serde_json::from_str(&std::fs::read_to_string(entry.path()).ok()?).ok()?;
            let session_cwd = stored["cwd"].as_str().unwrap_or_default().to_owned();
            (cwd.is_none_or(|c| c == session_cwd))
                .then(|| json!({"sessionId": id, "cwd": session_cwd, "title": format!("Session {id}")}))
        })
        .collect();
    sessions.sort_by(|a, b| a["sessionId"].as_str().cmp(&b["sessionId"].as_str()));
    sessions
}
