//! `session/request_permission`: the offered options only, with the proposed change
//! kept for display.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::answer::{InteractionAnswer, cancelled_result};
use super::bounds::{RequestRefused, check_chars, durable_json};
use crate::error::{EngineError, Reason};
use cursor_runner_activity::InteractionKind;

/// Who may decide the agent's permission requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalPolicy {
    /// A human decides each request; session-scoped approval is not offered.
    #[default]
    Ask,
    /// A human decides; `allow_always` may be offered.
    AllowSessionScope,
    /// Every permission request is rejected without a human.
    DenyAll,
}

impl ApprovalPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ask => "ask",
            Self::AllowSessionScope => "allow_session_scope",
            Self::DenyAll => "deny_all",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ask" => Some(Self::Ask),
            "allow_session_scope" => Some(Self::AllowSessionScope),
            "deny_all" => Some(Self::DenyAll),
            _ => None,
        }
    }
}

/// How the store reads an execution's policy back.
impl TryFrom<String> for ApprovalPolicy {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text).ok_or_else(|| format!("`{text}` is not an approval policy"))
    }
}

/// Options one permission request may carry; more is ambiguous and refused.
pub const MAX_PERMISSION_OPTIONS: usize = 32;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequest {
    pub session_id: String,
    pub tool_call_id: String,
    /// The tool call as the agent described it, including proposed diffs, for display.
    pub tool_call: Value,
    /// What the human may choose, in opaque ids.
    pub options: Vec<PermissionOption>,
    /// Native options not offered, and why (e.g. `allow_always` without session scope).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<WithheldOption>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    /// Opaque id (`option-N`).
    pub option_id: String,
    pub native_id: String,
    pub name: String,
    /// `allow_once | allow_always | reject_once | reject_always`.
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithheldOption {
    pub native_id: String,
    pub kind: String,
    pub why: String,
}

const KINDS: [&str; 4] = ["allow_once", "allow_always", "reject_once", "reject_always"];

/// Every text of the proposed tool call (title, diff texts, content) is one
/// description: each is bounded like a question's prompt or a plan's text.
fn check_texts(value: &Value) -> Result<(), RequestRefused> {
    match value {
        Value::String(text) => check_chars("tool call text", text),
        Value::Array(items) => items.iter().try_for_each(check_texts),
        Value::Object(fields) => fields.values().try_for_each(check_texts),
        _ => Ok(()),
    }
}

impl PermissionRequest {
    pub fn from_native(params: &Value, policy: ApprovalPolicy) -> Result<Self, RequestRefused> {
        let refuse = |m: &str| RequestRefused(m.to_owned());
        let session_id = params["sessionId"].as_str().ok_or_else(|| refuse("no sessionId"))?;
        let tool_call = params
            .get("toolCall")
            .filter(|t| t.is_object())
            .ok_or_else(|| refuse("no toolCall"))?;
        let tool_call_id = tool_call["toolCallId"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| refuse("no toolCallId"))?;
        check_texts(tool_call)?;
        let native = params["options"].as_array().ok_or_else(|| refuse("no options"))?;
        if native.is_empty() || native.len() > MAX_PERMISSION_OPTIONS {
            return Err(RequestRefused(format!(
                "a permission needs 1..={MAX_PERMISSION_OPTIONS} options"
            )));
        }
        let mut seen = HashSet::new();
        let mut options = Vec::new();
        let mut withheld = Vec::new();
        for option in native {
            let (Some(native_id), Some(name), Some(kind)) = (
                option["optionId"].as_str(),
                option["name"].as_str(),
                option["kind"].as_str(),
            ) else {
                return Err(refuse("an option lacks optionId, name or kind"));
            };
            if !KINDS.contains(&kind) {
                return Err(RequestRefused(format!("unknown option kind `{kind}`")));
            }
            if !seen.insert(native_id) {
                return Err(RequestRefused(format!("duplicate option id `{native_id}`")));
            }
            check_chars("option name", name)?;
            if kind == "allow_always" && policy != ApprovalPolicy::AllowSessionScope {
                withheld.push(WithheldOption {
                    native_id: native_id.into(),
                    kind: kind.into(),
                    why: "the approval policy does not allow session-scoped approval".into(),
                });
                continue;
            }
            options.push(PermissionOption {
                option_id: format!("option-{}", options.len() + 1),
                native_id: native_id.into(),
                name: name.into(),
                kind: kind.into(),
            });
        }
        let request = Self {
            session_id: session_id.into(),
            tool_call_id: tool_call_id.into(),
            tool_call: tool_call.clone(),
            options,
            withheld,
        };
        durable_json(InteractionKind::Permission, &request)?;
        Ok(request)
    }

    pub fn outcome_for(&self, answer: &InteractionAnswer) -> Result<Value, EngineError> {
        let invalid = |m: String| EngineError::invalid(Reason::AnswerInvalid, m);
        match answer {
            InteractionAnswer::SelectOption { option_id } => {
                let option = self
                    .options
                    .iter()
                    .find(|o| &o.option_id == option_id)
                    .ok_or_else(|| invalid(format!("`{option_id}` is not an offered option")))?;
                Ok(selected(&option.native_id))
            }
            // Decline is the one-time rejection; `reject_always` is never substituted.
            InteractionAnswer::Decline { .. } => self
                .reject_once()
                .map(|o| selected(&o.native_id))
                .ok_or_else(|| invalid("this request offers no reject_once option to decline with; cancel it".into())),
            InteractionAnswer::Cancel => Ok(cancelled_result()),
            _ => Err(invalid("a permission takes an option, a decline or a cancel".into())),
        }
    }

    /// The answer under `deny_all`: the one-time rejection if offered, else `cancelled`.
    pub fn policy_denial(&self) -> Value {
        self.reject_once()
            .map_or_else(cancelled_result, |o| selected(&o.native_id))
    }

    fn reject_once(&self) -> Option<&PermissionOption> {
        self.options.iter().find(|o| o.kind == "reject_once")
    }
}

fn selected(native_id: &str) -> Value {
    json!({"outcome": {"outcome": "selected", "optionId": native_id}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(options: Value) -> Value {
        json!({
            "sessionId": "s1",
            "toolCall": {"toolCallId": "tc1", "title": "Edit main.rs", "kind": "edit",
                "content": [{"type": "diff", "path": "/w/main.rs", "oldText": "a", "newText": "b"}]},
            "options": options
        })
    }

    fn cursor_options() -> Value {
        json!([
            {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
            {"optionId": "allow-always", "name": "Allow always", "kind": "allow_always"},
            {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}
        ])
    }

    #[test]
    fn allow_always_is_offered_only_under_session_scope() {
        let ask = PermissionRequest::from_native(&native(cursor_options()), ApprovalPolicy::Ask).unwrap();
        assert_eq!(
            ask.options.iter().map(|o| o.kind.as_str()).collect::<Vec<_>>(),
            ["allow_once", "reject_once"]
        );
        assert_eq!(ask.withheld[0].native_id, "allow-always");
        let scoped =
            PermissionRequest::from_native(&native(cursor_options()), ApprovalPolicy::AllowSessionScope).unwrap();
        assert_eq!(scoped.options.len(), 3);
    }

    #[test]
    fn the_proposed_diff_is_kept_for_display() {
        let p = PermissionRequest::from_native(&native(cursor_options()), ApprovalPolicy::Ask).unwrap();
        assert_eq!(p.tool_call["content"][0]["type"], "diff");
        assert_eq!(p.tool_call_id, "tc1");
    }

    #[test]
    fn answer_table() {
        let p = PermissionRequest::from_native(&native(cursor_options()), ApprovalPolicy::Ask).unwrap();
        let cases: Vec<(InteractionAnswer, Option<Value>)> = vec![
            (
                InteractionAnswer::SelectOption {
                    option_id: "option-1".into(),
                },
                Some(selected("allow-once")),
            ),
            (
                InteractionAnswer::SelectOption {
                    option_id: "option-2".into(),
                },
                Some(selected("reject-once")),
            ),
            (
                InteractionAnswer::SelectOption {
                    option_id: "option-3".into(),
                },
                None,
            ),
            (
                InteractionAnswer::SelectOption {
                    option_id: "allow-once".into(),
                },
                None,
            ),
            (
                InteractionAnswer::Decline { reason: None },
                Some(selected("reject-once")),
            ),
            (InteractionAnswer::Cancel, Some(cancelled_result())),
            (InteractionAnswer::AcceptPlan { feedback: None }, None),
        ];
        for (answer, expected) in cases {
            assert_eq!(p.outcome_for(&answer).ok(), expected, "{answer:?}");
        }
    }

    #[test]
    fn reject_always_is_never_substituted_for_a_decline() {
        let only_always = json!([
            {"optionId": "allow-once", "name": "Allow", "kind": "allow_once"},
            {"optionId": "reject-always", "name": "Never", "kind": "reject_always"}
        ]);
        let p = PermissionRequest::from_native(&native(only_always), ApprovalPolicy::Ask).unwrap();
        assert!(p.outcome_for(&InteractionAnswer::Decline { reason: None }).is_err());
        assert_eq!(p.policy_denial(), cancelled_result());
    }

    #[test]
    fn deny_all_selects_the_one_time_rejection() {
        let p = PermissionRequest::from_native(&native(cursor_options()), ApprovalPolicy::DenyAll).unwrap();
        assert_eq!(p.policy_denial(), selected("reject-once"));
    }

    #[test]
    fn every_tool_call_text_is_bounded_like_a_description_exactly_at_the_bound_passes() {
        use crate::interaction::MAX_DESCRIPTION_CHARS;
        let with_diff = |new_text: String| {
            let mut params = native(cursor_options());
            params["toolCall"]["content"][0]["newText"] = json!(new_text);
            params
        };
        let at_bound = "é".repeat(MAX_DESCRIPTION_CHARS);
        assert!(PermissionRequest::from_native(&with_diff(at_bound.clone()), ApprovalPolicy::Ask).is_ok());
        let refused = PermissionRequest::from_native(&with_diff(at_bound + "é"), ApprovalPolicy::Ask).unwrap_err();
        assert!(refused.0.contains("tool call text"), "{refused}");
    }

    #[test]
    fn malformed_requests_are_refused() {
        let too_many: Vec<Value> = (0..=MAX_PERMISSION_OPTIONS)
            .map(|i| json!({"optionId": format!("o{i}"), "name": "x", "kind": "allow_once"}))
            .collect();
        let at_bound: Vec<Value> = too_many[..MAX_PERMISSION_OPTIONS].to_vec();
        assert!(PermissionRequest::from_native(&native(json!(at_bound)), ApprovalPolicy::Ask).is_ok());
        let mut no_tool_call_id = native(cursor_options());
        no_tool_call_id["toolCall"]["toolCallId"] = json!("");
        let cases = vec![
            native(json!(too_many)),
            native(json!([])),
            native(json!([{"optionId": "x", "name": "x", "kind": "maybe"}])),
            native(
                json!([{"optionId": "x", "name": "x", "kind": "allow_once"}, {"optionId": "x", "name": "y", "kind": "reject_once"}]),
            ),
            no_tool_call_id,
            json!({"sessionId": "s1", "options": cursor_options()}),
        ];
        for case in cases {
            assert!(
                PermissionRequest::from_native(&case, ApprovalPolicy::Ask).is_err(),
                "{case}"
            );
        }
    }
}
