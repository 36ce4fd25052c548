//! What an execution records about the lease of its agent process (`GetExecution`
//! shows it): which slot, warm or cold, and how long each step took — the agent's
//! own `session/new` time kept apart from the lease, never hidden in it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseInfo {
    pub slot_id: String,
    /// An idle slot was taken (else a process was started for this execution).
    pub warm: bool,
    /// From the pool reservation until the process was ready for `session/new`, in
    /// microseconds (a warm lease takes well under a millisecond).
    #[serde(default)]
    pub lease_us: u64,
    /// Launching the process (when it was started, warm or cold).
    #[serde(default)]
    pub spawn_us: u64,
    /// Its `initialize` round trip.
    #[serde(default)]
    pub initialize_us: u64,
    /// The agent's own `session/new` time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_new_us: Option<u64>,
    /// Sessions the process served before this one.
    pub sessions_served: u32,
    /// The process's private home, where its sessions' history lives (a recovery or
    /// a later load launches in it again).
    #[serde(default)]
    pub home: String,
    /// The replica whose disk `home` is on (`None` on records from before it was kept):
    /// on any other, the session's state comes from its checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// The operator's agent profile the process runs under (`None`: `--agent-command`);
    /// a load or recovery of the session runs under the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_profile: Option<String>,
    /// What the agent said about itself at `initialize` (and what its session lacks of
    /// Cursor's surface). `None` on records from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentReport>,
    /// Fields a newer version wrote: kept, so this version's rewrite of the record (a
    /// fleet mid-upgrade) does not drop them.
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, serde_json::Value>,
}

/// The agent's `initialize` answer as it reported it — identity, capabilities, auth
/// methods — and, in typed form, what Cursor has that this agent's session does not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentReport {
    /// `protocolVersion` as answered.
    #[serde(default)]
    pub protocol_version: u32,
    /// `agentInfo` (empty when the agent sent none, as Cursor's SDK does not).
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub version: String,
    /// `agentCapabilities` exactly as reported, as JSON text (unknown keys kept).
    #[serde(default)]
    pub capabilities: String,
    #[serde(default)]
    pub auth_methods: Vec<AuthMethod>,
    #[serde(default)]
    pub unavailable: Vec<Unavailable>,
}

/// One of the agent's `authMethods`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthMethod {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// `type` as sent (`env_var`, `terminal`, …); empty for the default form, which has none.
    #[serde(default)]
    pub r#type: String,
    /// The variables an `env_var` method reads (`vars[].name`).
    #[serde(default)]
    pub variables: Vec<String>,
}

/// A Cursor capability this agent does not have, and why the service says so.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unavailable {
    /// `cursor_extensions`, `modes` or `models`.
    pub capability: String,
    pub reason: String,
}

/// Cursor's one documented auth method: the mark by which its `initialize` is known.
pub const CURSOR_AUTH_METHOD: &str = "cursor_login";

impl AgentReport {
    /// From `initialize`'s result and, once a session is open, `session/new`'s (its
    /// `configOptions`, `modes` and `models`). `under_profile`: the operator launched it
    /// as another agent than Cursor.
    pub fn new(initialized: &Value, session: Option<(&Value, &Value, &Value)>, under_profile: bool) -> Self {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let auth_methods: Vec<AuthMethod> = initialized["authMethods"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| AuthMethod {
                id: text(&m["id"]),
                name: text(&m["name"]),
                description: text(&m["description"]),
                r#type: text(&m["type"]),
                variables: m["vars"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v["name"].as_str().map(str::to_owned))
                    .collect(),
            })
            .collect();
        let info = &initialized["agentInfo"];
        let mut unavailable = Vec::new();
        let cursor = auth_methods.iter().any(|m| m.id == CURSOR_AUTH_METHOD);
        if under_profile || !cursor {
            unavailable.push(Unavailable {
                capability: "cursor_extensions".into(),
                reason: format!(
                    "not Cursor ({}): no cursor/* requests (questions, plans, todos, tasks, images) are expected from it and none is sent to it beyond a model-catalog probe a non-profiled agent may refuse",
                    if under_profile {
                        "launched under an agent profile"
                    } else {
                        "it does not offer Cursor's cursor_login auth method"
                    }
                ),
            });
        }
        if let Some((config_options, modes, models)) = session {
            let offered = |category: &str| {
                config_options
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|o| o["category"] == category || o["id"] == category)
            };
            if !offered("mode") && modes["availableModes"].as_array().is_none_or(Vec::is_empty) {
                unavailable.push(Unavailable {
                    capability: "modes".into(),
                    reason: "session/new reported no modes (no `modes`, no mode config option): SetMode and a requested mode are refused MODEL_UNAVAILABLE, and no agent profile can make it ask".into(),
                });
            }
            if !offered("model") && models["availableModels"].as_array().is_none_or(Vec::is_empty) {
                unavailable.push(Unavailable {
                    capability: "models".into(),
                    reason: "session/new reported no models (no `models`, no model config option): ListModels is empty, SetModel and a requested model are refused MODEL_UNAVAILABLE".into(),
                });
            }
        }
        Self {
            protocol_version: initialized["protocolVersion"]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(0),
            name: text(&info["name"]),
            title: text(&info["title"]),
            version: text(&info["version"]),
            capabilities: initialized
                .get("agentCapabilities")
                .map(Value::to_string)
                .unwrap_or_default(),
            auth_methods,
            unavailable,
        }
    }
}

/// A duration in whole microseconds, saturating.
pub fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl LeaseInfo {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a lease always serializes")
    }

    pub fn from_json(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_codex_like_initialize_is_kept_as_reported_and_cursor_extensions_are_unavailable() {
        let initialized = json!({"protocolVersion": 1,
            "agentCapabilities": {"loadSession": true, "future": {"x": 1}},
            "authMethods": [{"id": "chatgpt", "name": "Login"},
                {"type": "env_var", "id": "openai-api-key", "name": "Key", "vars": [{"name": "OPENAI_API_KEY"}]}],
            "agentInfo": {"name": "codex-acp", "title": "Codex", "version": "0.16.0"}});
        let options = json!([{"id": "mode", "category": "mode"}, {"id": "model", "category": "model"}]);
        let report = AgentReport::new(&initialized, Some((&options, &Value::Null, &Value::Null)), true);
        assert_eq!(report.name, "codex-acp");
        assert_eq!(
            serde_json::from_str::<Value>(&report.capabilities).unwrap(),
            initialized["agentCapabilities"]
        );
        assert_eq!(report.auth_methods[0].r#type, "");
        assert_eq!(report.auth_methods[1].variables, ["OPENAI_API_KEY"]);
        let missing: Vec<&str> = report.unavailable.iter().map(|u| u.capability.as_str()).collect();
        assert_eq!(missing, ["cursor_extensions"]);
    }

    #[test]
    fn an_agent_without_modes_or_models_says_so_and_cursor_has_everything() {
        let bare = json!({"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []});
        let report = AgentReport::new(&bare, Some((&Value::Null, &Value::Null, &Value::Null)), false);
        let missing: Vec<&str> = report.unavailable.iter().map(|u| u.capability.as_str()).collect();
        assert_eq!(missing, ["cursor_extensions", "modes", "models"]);
        let cursor = json!({"protocolVersion": 1, "agentCapabilities": {},
            "authMethods": [{"id": "cursor_login", "name": "Cursor Login"}]});
        let modes = json!({"availableModes": [{"id": "agent"}]});
        let models = json!({"availableModels": [{"modelId": "m"}]});
        let report = AgentReport::new(&cursor, Some((&Value::Null, &modes, &models)), false);
        assert!(report.unavailable.is_empty(), "{:?}", report.unavailable);
    }

    #[test]
    fn a_lease_recorded_before_the_report_existed_still_reads() {
        let old = r#"{"slotId":"s","warm":false,"sessionsServed":0}"#;
        assert_eq!(LeaseInfo::from_json(old).unwrap().agent, None);
    }

    #[test]
    fn a_field_a_newer_version_wrote_survives_this_version_s_rewrite() {
        let newer = json!({"slotId": "s", "warm": true, "sessionsServed": 2, "homeQuotaBytes": 7});
        let lease = LeaseInfo::from_json(&newer.to_string()).unwrap();
        assert_eq!(lease.slot_id, "s");
        let rewritten: Value = serde_json::from_str(&lease.to_json()).unwrap();
        assert_eq!(rewritten["homeQuotaBytes"], 7);
    }
}
