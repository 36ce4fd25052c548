//! The parameter shapes of Cursor's private `cursor/*` extension methods (agent → client
//! requests; their names are in [`crate::methods`]). None of them carries a `sessionId`;
//! they are attributed by `toolCallId`.
//!
//! The blocking ones (`ask_question`, `create_plan`) decode strictly: a fault refuses the
//! request. The fire-and-forget ones decode field by field ([`lenient`]): a missing or
//! mistyped field is absent, as if the agent had not sent it, and the rest still counts.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Number, Value};

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

/// Params of `cursor/update_todos`: `{toolCallId, todos[{id, content, status}], merge}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateTodosParams {
    #[serde(default, deserialize_with = "field")]
    pub tool_call_id: Option<String>,
    /// The todos as sent, `None` when `todos` is not an array. Entries stay raw: the
    /// checklist validates each one and drops (and counts) a malformed one, never the list.
    #[serde(default, deserialize_with = "field")]
    pub todos: Option<Vec<Value>>,
    /// `true` upserts by todo id; `false` or absent replaces the list.
    #[serde(default, deserialize_with = "field")]
    pub merge: Option<bool>,
}

/// Params of `cursor/task`, sent when a `Task` tool call ends (also a failed one): metadata,
/// not proof of success.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskParams {
    #[serde(default, deserialize_with = "field")]
    pub tool_call_id: Option<String>,
    #[serde(default, deserialize_with = "field")]
    pub agent_id: Option<String>,
    #[serde(default, deserialize_with = "field")]
    pub description: Option<String>,
    #[serde(default, deserialize_with = "field")]
    pub prompt: Option<String>,
    #[serde(default, deserialize_with = "field")]
    pub model: Option<String>,
    #[serde(default, deserialize_with = "subagent_type")]
    pub subagent_type: Option<SubagentType>,
    /// A number as sent (an integer or a float).
    #[serde(default, deserialize_with = "field")]
    pub duration_ms: Option<Number>,
}

/// `cursor/task`'s `subagentType`: a name (`explore`, `shell`, …), `{"custom": "<name>"}`,
/// or anything else, kept raw (the spec says to decode it as raw JSON).
#[derive(Debug, Clone, PartialEq)]
pub enum SubagentType {
    Named(String),
    Custom(String),
    Other(Value),
}

impl From<Value> for SubagentType {
    fn from(value: Value) -> Self {
        match value {
            Value::String(name) => Self::Named(name),
            Value::Object(map) if map.len() == 1 && map.get("custom").is_some_and(Value::is_string) => {
                Self::Custom(map["custom"].as_str().unwrap_or_default().to_owned())
            }
            other => Self::Other(other),
        }
    }
}

/// Params of `cursor/generate_image`. Paths are the agent's claims: check them on disk
/// before anything refers to them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateImageParams {
    #[serde(default, deserialize_with = "field")]
    pub tool_call_id: Option<String>,
    #[serde(default, deserialize_with = "field")]
    pub description: Option<String>,
    #[serde(default, deserialize_with = "field")]
    pub file_path: Option<String>,
    /// The string entries of `referenceImagePaths`; others are skipped.
    #[serde(default, deserialize_with = "strings")]
    pub reference_image_paths: Vec<String>,
}

macro_rules! from_params {
    ($($shape:ty),*) => {$(
        impl $shape {
            /// Decodes the params field by field (see the module docs).
            pub fn from_params(params: &Value) -> Self {
                lenient(params)
            }
        }
    )*};
}
from_params!(UpdateTodosParams, TaskParams, GenerateImageParams);

/// Decodes fire-and-forget params field by field; params that are not an object have no
/// fields (never decoded positionally from an array).
pub(crate) fn lenient<T: DeserializeOwned + Default>(params: &Value) -> T {
    if !params.is_object() {
        return T::default();
    }
    T::deserialize(params).unwrap_or_default()
}

/// One field: absent when missing, `null` or of another type.
fn field<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    Ok(T::deserialize(Value::deserialize(d)?).ok())
}

fn subagent_type<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SubagentType>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => None,
        other => Some(other.into()),
    })
}

fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|item| match item {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    })
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
