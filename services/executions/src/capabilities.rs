//! The capability matrix as data, from the same checked list (`docs/capabilities.json`,
//! verified against the seed by `services/activity/tests/capabilities.rs`) that renders
//! `docs/capabilities.md`.

use serde::Deserialize;

const LIST: &str = include_str!("../../../docs/capabilities.json");

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CapabilityEntry {
    pub table: String,
    pub row: String,
    /// `fixture`, `test`, `absent` or `pending`.
    pub status: String,
    #[serde(default)]
    pub evidence: Option<String>,
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

impl CapabilityEntry {
    /// How it is proven here, in words.
    pub fn evidence_text(&self) -> String {
        let evidence = self.evidence.clone().unwrap_or_default();
        match self.status.as_str() {
            "fixture" => format!("transcript {evidence}"),
            "test" => format!("test {evidence}"),
            "absent" if self.table == "runner" => "absent upstream".to_owned(),
            "absent" => "named absence".to_owned(),
            _ => format!("pending ({})", self.owner.clone().unwrap_or_default()),
        }
    }
}

/// Every capability. Nothing is qualified against a real, authenticated Cursor here.
pub fn capabilities() -> Vec<CapabilityEntry> {
    serde_json::from_str(LIST).expect("docs/capabilities.json is checked by the capability coverage test")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_list_parses_and_is_not_empty() {
        assert!(super::capabilities().len() > 30);
    }
}
