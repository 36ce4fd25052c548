//! Runner-owned MCP servers: an operator's allowlist of server definitions (stdio,
//! HTTP, SSE). A caller names servers from it; it can never hand the agent a command of
//! its own. The workspace's own MCP config stays refused (workspace policy) and the
//! user-level one is out of reach (private home).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, Reason};

/// Most MCP servers one execution may name.
pub const MAX_MCP_SERVERS_PER_EXECUTION: usize = 16;

/// One name/value pair of a server's environment or headers. Values often hold
/// secrets (API keys, bearer tokens), so `Debug` never shows them.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameValue {
    pub name: String,
    pub value: String,
}

impl std::fmt::Debug for NameValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}=<redacted>", self.name)
    }
}

/// A server definition in ACP's `mcpServers` shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum McpServer {
    /// `{type: "http" | "sse", name, url, headers}`.
    Remote {
        #[serde(rename = "type")]
        transport: RemoteTransport,
        name: String,
        url: String,
        #[serde(default)]
        headers: Vec<NameValue>,
    },
    /// `{name, command, args, env}` (no `type` key).
    Stdio {
        name: String,
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: Vec<NameValue>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoteTransport {
    Http,
    Sse,
}

impl McpServer {
    pub fn name(&self) -> &str {
        match self {
            Self::Remote { name, .. } | Self::Stdio { name, .. } => name,
        }
    }

    /// Header and environment values, labelled `mcp:<server>:<name>`: secrets the
    /// runner hands the agent, kept out of every event.
    pub fn secret_values(&self) -> Vec<(String, String)> {
        let (name, pairs) = match self {
            Self::Remote { name, headers, .. } => (name, headers),
            Self::Stdio { name, env, .. } => (name, env),
        };
        pairs
            .iter()
            .map(|pair| (format!("mcp:{name}:{}", pair.name), pair.value.clone()))
            .collect()
    }

    /// Whether the agent's `mcpCapabilities` (from `initialize`) allow this transport;
    /// every ACP agent takes stdio.
    pub fn supported_by(&self, initialized: &Value) -> bool {
        let caps = &initialized["agentCapabilities"]["mcpCapabilities"];
        match self {
            Self::Stdio { .. } => true,
            Self::Remote {
                transport: RemoteTransport::Http,
                ..
            } => caps["http"] == true,
            Self::Remote {
                transport: RemoteTransport::Sse,
                ..
            } => caps["sse"] == true,
        }
    }
}

/// The operator's allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpAllowlist {
    pub servers: Vec<McpServer>,
}

#[derive(Debug, thiserror::Error)]
#[error("the MCP allowlist is unusable: {0}")]
pub struct McpAllowlistError(String);

impl McpAllowlist {
    /// Parses `{"servers": [...]}`: unique non-empty names, absolute stdio commands.
    pub fn parse(text: &str) -> Result<Self, McpAllowlistError> {
        let list: Self = serde_json::from_str(text).map_err(|e| McpAllowlistError(e.to_string()))?;
        let mut names = HashSet::new();
        for server in &list.servers {
            if server.name().trim().is_empty() || !names.insert(server.name().to_owned()) {
                return Err(McpAllowlistError(format!(
                    "server names must be unique and non-empty (`{}`)",
                    server.name()
                )));
            }
            if let McpServer::Stdio { command, .. } = server
                && !std::path::Path::new(command).is_absolute()
            {
                return Err(McpAllowlistError(format!(
                    "`{}`: a stdio command must be an absolute path",
                    server.name()
                )));
            }
        }
        Ok(list)
    }

    /// The definitions `names` pick, in the caller's order.
    pub fn select(&self, names: &[String]) -> Result<Vec<McpServer>, EngineError> {
        if names.len() > MAX_MCP_SERVERS_PER_EXECUTION {
            return Err(EngineError::too_many_entries(
                "mcp_servers",
                MAX_MCP_SERVERS_PER_EXECUTION,
            ));
        }
        let mut seen = HashSet::new();
        names
            .iter()
            .map(|name| {
                if !seen.insert(name) {
                    return Err(EngineError::invalid(
                        Reason::InvalidArgument,
                        format!("MCP server `{name}` is named twice"),
                    ));
                }
                self.servers.iter().find(|s| s.name() == name).cloned().ok_or_else(|| {
                    EngineError::invalid(
                        Reason::McpServerNotAllowed,
                        format!("`{name}` is not an MCP server of this runner's allowlist"),
                    )
                    .with("server", name.clone())
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"{"servers": [
        {"name": "docs", "command": "/opt/mcp/docs", "args": ["--read-only"], "env": [{"name": "LEVEL", "value": "1"}]},
        {"type": "http", "name": "search", "url": "https://mcp.internal/search", "headers": []},
        {"type": "sse", "name": "events", "url": "https://mcp.internal/events"}
    ]}"#;

    #[test]
    fn definitions_keep_acps_shapes() {
        let list = McpAllowlist::parse(LIST).unwrap();
        let wire = serde_json::to_value(&list.servers).unwrap();
        assert_eq!(wire[0]["command"], "/opt/mcp/docs");
        assert!(wire[0].get("type").is_none(), "stdio has no type key");
        assert_eq!(wire[1]["type"], "http");
        assert_eq!(wire[2]["type"], "sse");
    }

    #[test]
    fn only_allowlisted_names_are_selected_in_the_callers_order() {
        let list = McpAllowlist::parse(LIST).unwrap();
        let picked = list.select(&["search".into(), "docs".into()]).unwrap();
        assert_eq!(
            picked.iter().map(McpServer::name).collect::<Vec<_>>(),
            ["search", "docs"]
        );
        let refused = list.select(&["rm-rf".into()]).unwrap_err();
        assert_eq!(refused.reason, Reason::McpServerNotAllowed);
        assert!(list.select(&["docs".into(), "docs".into()]).is_err());
        let over_bound: Vec<String> = vec!["docs".into(); MAX_MCP_SERVERS_PER_EXECUTION + 1];
        let refused = list.select(&over_bound).unwrap_err();
        assert_eq!(refused.reason, Reason::FieldTooLong, "{refused:?}");
        assert!(refused.metadata.contains(&("field".into(), "mcp_servers".into())));
        assert!(
            refused
                .metadata
                .contains(&("max_entries".into(), MAX_MCP_SERVERS_PER_EXECUTION.to_string()))
        );
    }

    #[test]
    fn an_unsafe_allowlist_is_refused_at_start() {
        for bad in [
            r#"{"servers": [{"name": "x", "command": "relative/path"}]}"#,
            r#"{"servers": [{"name": "", "command": "/bin/x"}]}"#,
            r#"{"servers": [{"name": "a", "command": "/bin/x"}, {"name": "a", "command": "/bin/y"}]}"#,
            r#"{"servers": [], "extra": 1}"#,
        ] {
            assert!(McpAllowlist::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_and_environment_values_never_show_in_debug_output() {
        let list = McpAllowlist::parse(
            r#"{"servers": [
                {"type": "http", "name": "s", "url": "https://x", "headers": [{"name": "authorization", "value": "Bearer canary-mcp"}]},
                {"name": "d", "command": "/bin/d", "env": [{"name": "API_KEY", "value": "canary-env"}]}
            ]}"#,
        )
        .unwrap();
        let shown = format!("{list:?}");
        assert!(!shown.contains("canary"), "{shown}");
        assert!(shown.contains("authorization=<redacted>") && shown.contains("API_KEY=<redacted>"));
    }

    #[test]
    fn remote_transports_need_the_agents_capability() {
        let list = McpAllowlist::parse(LIST).unwrap();
        let cursor = serde_json::json!({"agentCapabilities": {"mcpCapabilities": {"http": true, "sse": false}}});
        let supported: Vec<bool> = list.servers.iter().map(|s| s.supported_by(&cursor)).collect();
        assert_eq!(supported, [true, true, false]);
    }
}
