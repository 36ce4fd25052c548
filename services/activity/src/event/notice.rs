//! `provider.notice.recorded`: what the provider said or did that has no family of its own.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeScope {
    Turn,
    Session,
    Environment,
    Account,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderNotice {
    pub severity: Severity,
    pub category: String,
    pub scope: NoticeScope,
    pub recoverable: bool,
    pub user_actionable: bool,
    pub summary: String,
    /// Set when the summary had terminal control sequences neutralized.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
    /// The child agent the notice is about, when it came from a child's transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
}

impl ProviderNotice {
    /// A recoverable, non-actionable notice; the summary is sanitized and bounded.
    pub fn new(
        severity: Severity,
        category: impl Into<String>,
        scope: NoticeScope,
        summary: impl Into<String>,
    ) -> Self {
        let clean = crate::sanitize::sanitize_display(&summary.into());
        Self {
            severity,
            category: category.into(),
            scope,
            recoverable: true,
            user_actionable: false,
            summary: crate::bounds::bound_text(&clean.text, NOTICE_SUMMARY_CHARS).text,
            sanitized: clean.sanitized,
            child_id: None,
        }
    }

    pub fn warning(category: impl Into<String>, scope: NoticeScope, summary: impl Into<String>) -> Self {
        Self::new(Severity::Warning, category, scope, summary)
    }

    pub fn info(category: impl Into<String>, scope: NoticeScope, summary: impl Into<String>) -> Self {
        Self::new(Severity::Info, category, scope, summary)
    }
}

/// Characters a notice summary may carry (PRP short text).
pub const NOTICE_SUMMARY_CHARS: usize = 4000;
