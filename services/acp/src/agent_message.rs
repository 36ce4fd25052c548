//! The typed classification of what an agent sends ([`AgentMessage`]), by the method
//! names of [`crate::methods`] and into the shapes of [`crate::cursor`].
//!
//! Cursor's `cursor/*` names carry no `_` prefix, so the schema crate's dispatch cannot
//! route them; this classifier does. Standard ACP shapes are the schema crate's, except
//! `session/update`, which stays raw (Cursor sends tags the schema has no variant for:
//! see [`SessionUpdate`]).

use serde::Deserialize;
use serde_json::Value;

use crate::cursor::{AskQuestionParams, CreatePlanParams, GenerateImageParams, TaskParams, UpdateTodosParams};
use crate::methods::*;

/// The params of one `session/update`, kept raw: `SessionUpdate` in the schema is tagged
/// by `sessionUpdate` with no unknown-variant fallback, and Cursor sends tags it lacks
/// (`subagent_spawned`, `subagent_state_update`), so the normalizer switches on the tag
/// itself. Read field by field: a missing or mistyped field is absent, never an error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionUpdate<'a> {
    /// The whole params object, as sent.
    pub params: &'a Value,
}

impl<'a> SessionUpdate<'a> {
    pub fn new(params: &'a Value) -> Self {
        Self { params }
    }

    /// `sessionId`, when it is a string.
    pub fn session_id(&self) -> Option<&'a str> {
        self.params.get("sessionId").and_then(Value::as_str)
    }

    /// The `update` object (`Null` when absent).
    pub fn update(&self) -> &'a Value {
        self.params.get("update").unwrap_or(&Value::Null)
    }
}

/// A blocking request whose params did not decode: refused on the wire, with this as
/// the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedParams {
    pub method: &'static str,
    pub error: String,
}

impl std::fmt::Display for MalformedParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed {}: {}", self.method, self.error)
    }
}

/// What an agent sent, by method, with its params decoded where this service acts on
/// them. Whether it came as a request (answer exactly once) or a notification (never
/// answer) is the caller's: Cursor sends its fire-and-forget extensions both ways.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentMessage<'a> {
    /// `session/update`: a standard or Cursor session update.
    SessionUpdate(SessionUpdate<'a>),
    /// `session/request_permission`, kept raw: the interaction layer validates it and
    /// owns its refusal reasons.
    RequestPermission(&'a Value),
    /// `cursor/ask_question` (blocking).
    AskQuestion(Result<AskQuestionParams, MalformedParams>),
    /// `cursor/create_plan` (blocking).
    CreatePlan(Result<CreatePlanParams, MalformedParams>),
    /// `cursor/update_todos` (fire-and-forget).
    UpdateTodos(UpdateTodosParams),
    /// `cursor/task` (fire-and-forget).
    Task(TaskParams),
    /// `cursor/generate_image` (fire-and-forget).
    GenerateImage(GenerateImageParams),
    /// Anything else: `fs/*`, `terminal/*`, an unknown `cursor/*`, … A request of it is
    /// answered `-32601`; a notification is ignored.
    Unknown { method: &'a str },
}

impl<'a> AgentMessage<'a> {
    /// Classifies one agent message by its method. Blocking requests are decoded
    /// strictly (a fault is [`MalformedParams`]); fire-and-forget extensions field by
    /// field, so one mistyped field is absent rather than losing the message.
    pub fn classify(method: &'a str, params: &'a Value) -> Self {
        match method {
            SESSION_UPDATE => Self::SessionUpdate(SessionUpdate::new(params)),
            SESSION_REQUEST_PERMISSION => Self::RequestPermission(params),
            ASK_QUESTION => Self::AskQuestion(strict(ASK_QUESTION, params)),
            CREATE_PLAN => Self::CreatePlan(strict(CREATE_PLAN, params)),
            UPDATE_TODOS => Self::UpdateTodos(UpdateTodosParams::from_params(params)),
            TASK => Self::Task(TaskParams::from_params(params)),
            GENERATE_IMAGE => Self::GenerateImage(GenerateImageParams::from_params(params)),
            method => Self::Unknown { method },
        }
    }

    /// The method it came as.
    pub fn method(&self) -> &'a str {
        match self {
            Self::SessionUpdate(_) => SESSION_UPDATE,
            Self::RequestPermission(_) => SESSION_REQUEST_PERMISSION,
            Self::AskQuestion(_) => ASK_QUESTION,
            Self::CreatePlan(_) => CREATE_PLAN,
            Self::UpdateTodos(_) => UPDATE_TODOS,
            Self::Task(_) => TASK,
            Self::GenerateImage(_) => GENERATE_IMAGE,
            Self::Unknown { method } => method,
        }
    }

    /// Cursor's fire-and-forget extensions: a request of one is acknowledged at once
    /// (`{}`), never waiting on anyone.
    pub fn is_fire_and_forget(&self) -> bool {
        matches!(self, Self::UpdateTodos(_) | Self::Task(_) | Self::GenerateImage(_))
    }
}

fn strict<T: for<'de> Deserialize<'de>>(method: &'static str, params: &Value) -> Result<T, MalformedParams> {
    T::deserialize(params).map_err(|e| MalformedParams {
        method,
        error: e.to_string(),
    })
}

#[cfg(test)]
#[path = "agent_message_tests.rs"]
mod tests;
