//! `cursor/create_plan`: the full presentation, kept whole, and accept / reject /
//! cancel decisions.

use cursor_runner_acp::cursor::{CreatePlanParams, PlanPhase, PlanTodo};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::answer::{InteractionAnswer, cancelled_result};
use super::bounds::{RequestRefused, check_chars, durable_json};
use crate::error::{EngineError, Reason};
use cursor_runner_activity::InteractionKind;

/// Characters a rejection reason may have (PRP short text).
pub const MAX_REJECTION_REASON_CHARS: usize = 4_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overview: Option<String>,
    /// The plan as the agent sent it: markdown, or any other JSON it chose.
    pub plan: Value,
    pub todos: Vec<PlanTodo>,
    pub phases: Vec<PlanPhase>,
    pub is_project: bool,
    /// `sha256:<hex>` of the whole revision: detects "the same plan again"; never the key.
    pub revision_digest: String,
    /// The id a UI shows for the decision (`plan-<hex>`).
    pub question_id: String,
}

impl PlanRequest {
    pub fn from_native(params: CreatePlanParams) -> Result<Self, RequestRefused> {
        // A plan with no plan text, todos or phases gives a human nothing to decide on.
        let empty_plan = match &params.plan {
            Value::Null => true,
            Value::String(text) => text.trim().is_empty(),
            _ => false,
        };
        if empty_plan && params.todos.is_empty() && params.phases.is_empty() {
            return Err(RequestRefused("a plan with no plan, todos or phases".into()));
        }
        if let Some(name) = &params.name {
            check_chars("plan name", name)?;
        }
        if let Some(overview) = &params.overview {
            check_chars("plan overview", overview)?;
        }
        match &params.plan {
            Value::String(text) => check_chars("plan", text)?,
            other => check_chars("plan", &other.to_string())?,
        }
        for todo in params
            .todos
            .iter()
            .chain(params.phases.iter().flat_map(|p| p.todos.iter()))
        {
            check_chars("todo", &todo.content)?;
        }
        for phase in &params.phases {
            check_chars("phase name", &phase.name)?;
        }
        let digest = revision_digest(&params);
        let request = Self {
            question_id: format!("plan-{digest}"),
            revision_digest: format!("sha256:{digest}"),
            tool_call_id: params.tool_call_id,
            name: params.name,
            overview: params.overview,
            plan: params.plan,
            todos: params.todos,
            phases: params.phases,
            is_project: params.is_project,
        };
        durable_json(InteractionKind::Plan, &request)?;
        Ok(request)
    }

    pub fn outcome_for(&self, answer: &InteractionAnswer) -> Result<Value, EngineError> {
        let invalid = |m: &str| EngineError::invalid(Reason::AnswerInvalid, m);
        match answer {
            InteractionAnswer::AcceptPlan { feedback } if feedback.as_deref().is_some_and(|f| !f.is_empty()) => Err(
                invalid("Cursor cannot accept a plan with feedback; reject it with a reason instead"),
            ),
            // No `planUri`: no plan artifact is registered, and none is invented.
            InteractionAnswer::AcceptPlan { .. } => Ok(json!({"outcome": {"outcome": "accepted"}})),
            InteractionAnswer::RejectPlan { reason } => match reason.as_deref().filter(|r| !r.is_empty()) {
                None => Ok(json!({"outcome": {"outcome": "rejected"}})),
                Some(r) if r.chars().count() > MAX_REJECTION_REASON_CHARS => {
                    Err(invalid("a rejection reason may have at most 4000 characters"))
                }
                Some(r) => Ok(json!({"outcome": {"outcome": "rejected", "reason": r}})),
            },
            InteractionAnswer::Cancel => Ok(cancelled_result()),
            _ => Err(invalid("a plan takes accept, reject or cancel")),
        }
    }
}

/// A digest of the whole revision: everything but the tool call that carried it.
fn revision_digest(params: &CreatePlanParams) -> String {
    let revision = json!({
        "name": params.name,
        "overview": params.overview,
        "plan": params.plan,
        "todos": params.todos,
        "phases": params.phases,
        "isProject": params.is_project,
    });
    hex::encode(Sha256::digest(revision.to_string().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interaction::{MAX_DESCRIPTION_CHARS, MAX_DURABLE_PAYLOAD_BYTES, PersistedRequest};

    fn params(v: Value) -> CreatePlanParams {
        serde_json::from_value(v).unwrap()
    }

    fn sample() -> PlanRequest {
        PlanRequest::from_native(params(json!({
            "toolCallId": "tp1", "name": "Refactor", "overview": "Split the module",
            "plan": "# Plan\n1. Read 📖\n2. Write ✍️", "isProject": true,
            "todos": [{"id": "t1", "content": "Read", "status": "pending"}],
            "phases": [{"name": "One", "todos": [{"id": "t2", "content": "Write", "status": "cancelled"}]}]
        })))
        .unwrap()
    }

    #[test]
    fn the_full_presentation_is_kept() {
        let p = sample();
        assert_eq!(p.plan, "# Plan\n1. Read 📖\n2. Write ✍️");
        assert_eq!(p.phases[0].todos[0].status, "cancelled");
        assert!(p.is_project);
        assert!(p.question_id.starts_with("plan-") && p.revision_digest.starts_with("sha256:"));
    }

    #[test]
    fn a_non_string_plan_is_tolerated() {
        let p = PlanRequest::from_native(params(json!({"plan": {"steps": [1, 2]}}))).unwrap();
        assert_eq!(p.plan, json!({"steps": [1, 2]}));
    }

    #[test]
    fn a_plan_with_nothing_to_decide_on_is_refused() {
        for nothing in [
            json!({"toolCallId": "p0"}),
            json!({"toolCallId": "p0", "plan": "  ", "name": "Named", "overview": "only"}),
            json!({"plan": null, "todos": [], "phases": []}),
        ] {
            assert!(PlanRequest::from_native(params(nothing.clone())).is_err(), "{nothing}");
        }
        for something in [
            json!({"plan": "do it"}),
            json!({"todos": [{"id": "t", "content": "Read", "status": "pending"}]}),
        ] {
            assert!(
                PlanRequest::from_native(params(something.clone())).is_ok(),
                "{something}"
            );
        }
    }

    #[test]
    fn the_digest_names_the_revision_not_the_tool_call() {
        let a = sample();
        let mut other_call = params(json!({
            "toolCallId": "tp2", "name": "Refactor", "overview": "Split the module",
            "plan": "# Plan\n1. Read 📖\n2. Write ✍️", "isProject": true,
            "todos": [{"id": "t1", "content": "Read", "status": "pending"}],
            "phases": [{"name": "One", "todos": [{"id": "t2", "content": "Write", "status": "cancelled"}]}]
        }));
        assert_eq!(
            PlanRequest::from_native(other_call.clone()).unwrap().revision_digest,
            a.revision_digest
        );
        other_call.overview = Some("Changed".into());
        assert_ne!(
            PlanRequest::from_native(other_call).unwrap().revision_digest,
            a.revision_digest
        );
    }

    #[test]
    fn decision_table() {
        let p = sample();
        let cases: Vec<(InteractionAnswer, Result<Value, ()>)> = vec![
            (
                InteractionAnswer::AcceptPlan { feedback: None },
                Ok(json!({"outcome":{"outcome":"accepted"}})),
            ),
            (
                InteractionAnswer::AcceptPlan {
                    feedback: Some(String::new()),
                },
                Ok(json!({"outcome":{"outcome":"accepted"}})),
            ),
            (
                InteractionAnswer::AcceptPlan {
                    feedback: Some("but also".into()),
                },
                Err(()),
            ),
            (
                InteractionAnswer::RejectPlan {
                    reason: Some("split step 1".into()),
                },
                Ok(json!({"outcome":{"outcome":"rejected","reason":"split step 1"}})),
            ),
            (
                InteractionAnswer::RejectPlan { reason: None },
                Ok(json!({"outcome":{"outcome":"rejected"}})),
            ),
            (
                InteractionAnswer::RejectPlan {
                    reason: Some("x".repeat(MAX_REJECTION_REASON_CHARS)),
                },
                Ok(json!({"outcome":{"outcome":"rejected","reason":"x".repeat(MAX_REJECTION_REASON_CHARS)}})),
            ),
            (
                InteractionAnswer::RejectPlan {
                    reason: Some("x".repeat(MAX_REJECTION_REASON_CHARS + 1)),
                },
                Err(()),
            ),
            (
                InteractionAnswer::Cancel,
                Ok(json!({"outcome":{"outcome":"cancelled"}})),
            ),
            (InteractionAnswer::Decline { reason: None }, Err(())),
            (
                InteractionAnswer::SelectOption {
                    option_id: "option-1".into(),
                },
                Err(()),
            ),
        ];
        for (answer, expected) in cases {
            let got = p
                .outcome_for(&answer)
                .map_err(|e| assert_eq!(e.reason, Reason::AnswerInvalid));
            assert_eq!(got, expected, "{answer:?}");
        }
    }

    #[test]
    fn plan_text_at_the_bound_passes_and_one_char_over_is_refused() {
        let at = PlanRequest::from_native(params(json!({"plan": "p".repeat(MAX_DESCRIPTION_CHARS)})));
        assert!(at.is_ok());
        let over = PlanRequest::from_native(params(json!({"plan": "p".repeat(MAX_DESCRIPTION_CHARS + 1)})));
        assert!(over.is_err());
    }

    #[test]
    fn an_oversized_plan_is_refused_never_truncated() {
        let todos: Vec<Value> = (0..3)
            .map(|i| json!({"id": format!("t{i}"), "content": "c".repeat(80_000), "status": "pending"}))
            .collect();
        let refused = PlanRequest::from_native(params(json!({"plan": "short", "todos": todos}))).unwrap_err();
        assert!(refused.0.contains(&MAX_DURABLE_PAYLOAD_BYTES.to_string()), "{refused}");
    }

    #[test]
    fn text_postgres_cannot_hold_raw_survives_as_json() {
        let p = PlanRequest::from_native(params(json!({"plan": "nul:\u{0}:end 日本"}))).unwrap();
        let text = PersistedRequest::Plan(p.clone()).to_durable_json().unwrap();
        assert!(!text.contains('\u{0}'), "stored JSON escapes U+0000");
        let back: PersistedRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, PersistedRequest::Plan(p));
    }
}
