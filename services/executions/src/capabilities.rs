//! The capability matrix as data, from the same checked list (`docs/capabilities.json`,
//! verified against the seed by `services/activity/tests/capabilities.rs`) that renders
//! `docs/capabilities.md`.

use cursor_runner_supervisor::isolation::{AgentIsolation, IsolationLayer};
use serde::Deserialize;

const LIST: &str = include_str!("../../../docs/capabilities.json");

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CapabilityEntry {
    pub table: String,
    pub row: String,
    /// `fixture`, `test`, `absent` or `pending`.
    pub status: String,
    #[serde(default)]
    pub evidence: Option<Evidence>,
    #[serde(default)]
    pub owner: Option<String>,
    /// PRP's `availability`: `available`, `unsupported` or `policy_disabled`.
    pub availability: String,
    /// PRP's `detailLevel`: `structured`, or `summary` (a partial capability is
    /// `available` with `summary` detail and a reason).
    pub detail: String,
    /// `unverified` or `verified_here`: implemented is not qualified.
    pub qualification: String,
    pub reason: String,
}

/// What proves a row: a fixture transcript's name, or the tests that exercise it (each with
/// the markers its body must contain, checked by the capability coverage test).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Evidence {
    Transcript(String),
    Tests(Vec<TestEvidence>),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TestEvidence {
    pub test: String,
    #[serde(default)]
    pub exercises: Vec<String>,
}

impl CapabilityEntry {
    /// How it is proven here, in words.
    pub fn evidence_text(&self) -> String {
        let evidence = match &self.evidence {
            None => String::new(),
            Some(Evidence::Transcript(name)) => name.clone(),
            Some(Evidence::Tests(tests)) => tests.iter().map(|t| t.test.as_str()).collect::<Vec<_>>().join(", "),
        };
        match self.status.as_str() {
            "fixture" => format!("transcript {evidence}"),
            "test" => format!("test {evidence}"),
            "absent" if self.table == "runner" => "absent upstream".to_owned(),
            "absent" => "named absence".to_owned(),
            _ => format!("pending ({})", self.owner.clone().unwrap_or_default()),
        }
    }
}

/// The row whose availability is this host's, not the build's: see [`capabilities_here`].
pub const AGENT_ISOLATION: &str = "Agent isolation";

/// Every capability. Nothing is qualified against a real, authenticated Cursor here.
pub fn capabilities() -> Vec<CapabilityEntry> {
    serde_json::from_str(LIST).expect("docs/capabilities.json is checked by the capability coverage test")
}

/// Every capability as this service has it: the [`AGENT_ISOLATION`] row says what is in
/// force — unsupported without separate uids (an agent then shares the service's uid, or
/// runs as root), available with summary detail while another layer is missing, and
/// available with structured detail only when every layer is in force — with a reason
/// naming each missing layer.
pub fn capabilities_here(isolation: &AgentIsolation) -> Vec<CapabilityEntry> {
    let mut list = capabilities();
    for entry in list.iter_mut().filter(|entry| entry.row == AGENT_ISOLATION) {
        let (availability, detail) = if !isolation.has(IsolationLayer::SeparateUids) {
            ("unsupported", "summary")
        } else if !isolation.is_complete() {
            ("available", "summary")
        } else {
            ("available", "structured")
        };
        entry.availability = availability.to_owned();
        entry.detail = detail.to_owned();
        entry.reason = isolation.reason();
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    fn isolation_row(isolation: AgentIsolation) -> CapabilityEntry {
        capabilities_here(&isolation)
            .into_iter()
            .find(|entry| entry.row == AGENT_ISOLATION)
            .expect("the list has the agent isolation row")
    }

    const COMPLETE: AgentIsolation = AgentIsolation {
        separate_uids: true,
        pid_namespace: true,
        private_proc: true,
        non_dumpable: true,
    };

    #[test]
    fn the_embedded_list_parses_and_is_not_empty() {
        assert!(capabilities().len() > 30);
    }

    #[test]
    fn agent_isolation_is_structured_only_with_every_layer_in_force() {
        let row = isolation_row(COMPLETE);
        assert_eq!(
            (row.availability.as_str(), row.detail.as_str()),
            ("available", "structured")
        );
    }

    #[test]
    fn agent_isolation_without_a_namespace_layer_is_partial_and_names_it() {
        let row = isolation_row(AgentIsolation {
            private_proc: false,
            ..COMPLETE
        });
        assert_eq!(
            (row.availability.as_str(), row.detail.as_str()),
            ("available", "summary")
        );
        assert!(row.reason.contains("missing: private /proc"), "{}", row.reason);
    }

    #[test]
    fn agent_isolation_without_separate_uids_is_unsupported() {
        let row = isolation_row(AgentIsolation {
            separate_uids: false,
            ..COMPLETE
        });
        assert_eq!(row.availability, "unsupported");
        assert!(row.reason.contains("separate uids"), "{}", row.reason);
    }
}
