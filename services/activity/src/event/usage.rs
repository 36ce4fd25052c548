//! `usage.reported`: the turn's one usage record.

use serde::{Deserialize, Serialize};

/// A provider-reported cost, as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportedCost {
    pub amount: f64,
    pub currency: String,
}

/// `usage.reported`, once per turn. Unknown stays unknown: token and cost fields are
/// absent — never zero — unless the agent reported them (ACP `usage_update`: `used`
/// and `size` are the context window's used and total tokens, as sent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageReported {
    pub turn_id: String,
    /// PRP `requestCountSource`: `unavailable` (ACP never reports request counts).
    pub request_count_source: String,
    /// PRP `providerCostStatus`: `reported` or `unpriced`.
    pub provider_cost_status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_cost_unavailable_reason: Option<String>,
    /// Extension: what the numbers rest on, `acp_usage_update`, or absent when nothing
    /// was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<ReportedCost>,
}
