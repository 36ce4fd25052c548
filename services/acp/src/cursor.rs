//! Cursor's private `cursor/*` extension methods (agent → client requests). None of
//! them carries a `sessionId`; they are attributed by `toolCallId`.

use serde::{Deserialize, Serialize};

pub const ASK_QUESTION: &str = "cursor/ask_question";
pub const CREATE_PLAN: &str = "cursor/create_plan";
pub const UPDATE_TODOS: &str = "cursor/update_todos";
pub const TASK: &str = "cursor/task";
pub const GENERATE_IMAGE: &str = "cursor/generate_image";

/// Params of `cursor/ask_question`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AskQuestionParams {
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    pub questions: Vec<NativeQuestion>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NativeQuestion {
    pub id: String,
    pub prompt: String,
    pub options: Vec<NativeOption>,
    #[serde(default)]
    pub allow_multiple: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NativeOption {
    pub id: String,
    pub label: String,
}

/// Params of `cursor/create_plan`. `plan` is markdown, but other JSON is tolerated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatePlanParams {
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub overview: Option<String>,
    #[serde(default)]
    pub plan: serde_json::Value,
    #[serde(default)]
    pub todos: Vec<PlanTodo>,
    #[serde(default)]
    pub phases: Vec<PlanPhase>,
    #[serde(default)]
    pub is_project: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanTodo {
    pub id: String,
    pub content: String,
    /// `pending | in_progress | completed | cancelled`, kept verbatim.
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanPhase {
    pub name: String,
    #[serde(default)]
    pub todos: Vec<PlanTodo>,
}

/// One answered question in an `answered` outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NativeAnswer {
    pub question_id: String,
    pub selected_option_ids: Vec<String>,
}

/// The result body of `cursor/ask_question`, nested as Cursor documents it:
/// `{"outcome":{"outcome":"answered","answers":[…]}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum AskQuestionOutcome {
    Answered {
        answers: Vec<NativeAnswer>,
    },
    Skipped {
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    Cancelled,
}

impl AskQuestionOutcome {
    pub fn to_result(&self) -> serde_json::Value {
        serde_json::json!({ "outcome": self })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_answer_shape_is_nested_as_cursor_documents_it() {
        let outcome = AskQuestionOutcome::Answered {
            answers: vec![NativeAnswer {
                question_id: "q1".into(),
                selected_option_ids: vec!["pg".into()],
            }],
        };
        assert_eq!(
            outcome.to_result(),
            json!({"outcome":{"outcome":"answered","answers":[{"questionId":"q1","selectedOptionIds":["pg"]}]}})
        );
        assert_eq!(
            AskQuestionOutcome::Cancelled.to_result(),
            json!({"outcome":{"outcome":"cancelled"}})
        );
    }

    #[test]
    fn ask_question_params_tolerate_missing_optional_fields() {
        let p: AskQuestionParams = serde_json::from_value(json!({
            "questions":[{"id":"q","prompt":"?","options":[{"id":"a","label":"A"}]}],
            "extra": 1
        }))
        .unwrap();
        assert!(!p.questions[0].allow_multiple);
        assert_eq!(p.tool_call_id, None);
    }
}
