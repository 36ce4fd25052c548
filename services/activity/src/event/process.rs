//! `process.*` (extension): the agent process's spawn, exit and release.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessSpawned {
    pub pid: u32,
    /// `unpinned` for a development command; a pinned distribution's digest otherwise.
    pub distribution: String,
    pub program: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessExited {
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Who ended it: `agent` (it exited by itself) or `runner` (the stop ladder).
    pub initiated_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessReleased {
    pub pid: u32,
    /// Sessions the process has served, this one included.
    pub sessions_served: u32,
}
