//! The size of every string a request carries, bounded before anything is decided or
//! stored: an oversized field is `INVALID_ARGUMENT` / `FIELD_TOO_LONG` naming the field
//! (`field`, `max_bytes` in the metadata). Prompt blocks have bounds of their own
//! (`PROMPT_INVALID`). Bounds are in UTF-8 bytes; free text is bounded here only loosely
//! enough that the domain's bound in characters (what the contract promises) decides.

use cursor_runner_executions::interaction::plan::MAX_REJECTION_REASON_CHARS;
use cursor_runner_executions::{EngineError, Reason};
use tonic::Status;

use crate::pb;
use crate::status::to_status;

/// Ids the service or the control plane made: request ids, execution, turn,
/// interaction and session ids, etags, page tokens, control-session ids.
pub const MAX_ID_BYTES: usize = 256;
/// Names and values of configuration: models, modes, options, parameters, providers,
/// credential names, MCP server names, question and option ids of an answer.
pub const MAX_NAME_BYTES: usize = 256;
/// A workspace path.
pub const MAX_PATH_BYTES: usize = 4096;
/// A bound credential's secret.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;
/// Free text a human writes to the agent: a decline or rejection reason, plan feedback.
/// The contract bounds a rejection reason in characters (4,000); at four UTF-8 bytes each,
/// so no script is cut below that promise here.
pub const MAX_REASON_BYTES: usize = 4 * MAX_REJECTION_REASON_CHARS;
/// Entries of a repeated or map field (MCP servers, model parameters, selections, option ids).
pub const MAX_ENTRIES: usize = 64;
/// One encoded request message, as the transport decodes it: over this is
/// `RESOURCE_EXHAUSTED` / `MESSAGE_TOO_LARGE` before any field is looked at. It leaves room
/// for the largest prompt (`MAX_IMAGE_BYTES` of image, base64-encoded) and is gRPC's default.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// A request whose string fields are checked against their bounds.
pub trait Bounded {
    fn check_bounds(&self) -> Result<(), Status>;
}

fn at_most(field: &str, value: &str, max_bytes: usize) -> Result<(), Status> {
    if value.len() <= max_bytes {
        return Ok(());
    }
    Err(to_status(
        EngineError::invalid(
            Reason::FieldTooLong,
            format!("{field} has {} bytes; at most {max_bytes} are taken", value.len()),
        )
        .with("field", field)
        .with("max_bytes", max_bytes.to_string()),
    ))
}

fn entries(field: &str, count: usize) -> Result<(), Status> {
    if count <= MAX_ENTRIES {
        return Ok(());
    }
    Err(to_status(
        EngineError::invalid(
            Reason::FieldTooLong,
            format!("{field} has {count} entries; at most {MAX_ENTRIES} are taken"),
        )
        .with("field", field)
        .with("max_entries", MAX_ENTRIES.to_string()),
    ))
}

/// Each listed `(field, value)` is an id: bounded, and free of control characters (a NUL
/// is a malformed id, which PostgreSQL could not even store).
fn ids(fields: &[(&str, &str)]) -> Result<(), Status> {
    fields.iter().try_for_each(|(field, value)| {
        at_most(field, value, MAX_ID_BYTES)?;
        printable(field, value)
    })
}

fn printable(field: &str, value: &str) -> Result<(), Status> {
    if !value.chars().any(char::is_control) {
        return Ok(());
    }
    Err(to_status(
        EngineError::invalid(Reason::InvalidArgument, format!("{field} holds a control character"))
            .with("field", field),
    ))
}

fn names<'a>(field: &str, values: impl ExactSizeIterator<Item = &'a String>) -> Result<(), Status> {
    entries(field, values.len())?;
    values
        .into_iter()
        .try_for_each(|value| at_most(field, value, MAX_NAME_BYTES))
}

fn credential(binding: &pb::CredentialBinding) -> Result<(), Status> {
    at_most("credential.provider", &binding.provider, MAX_NAME_BYTES)?;
    ids(&[("credential.session_id", &binding.session_id)])?;
    at_most("credential.credential_name", &binding.credential_name, MAX_NAME_BYTES)?;
    at_most("credential.secret", &binding.secret, MAX_SECRET_BYTES)
}

impl Bounded for pb::GetCapabilitiesRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        Ok(())
    }
}

impl Bounded for pb::CreateExecutionRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        ids(&[
            ("request_id", &self.request_id),
            ("control_session_id", &self.control_session_id),
            ("load_session_id", &self.load_session_id),
        ])?;
        at_most("workspace", &self.workspace, MAX_PATH_BYTES)?;
        at_most("model", &self.model, MAX_NAME_BYTES)?;
        at_most("mode", &self.mode, MAX_NAME_BYTES)?;
        at_most("agent_profile", &self.agent_profile, MAX_NAME_BYTES)?;
        names("model_parameters", self.model_parameters.keys())?;
        names("model_parameters", self.model_parameters.values())?;
        names("mcp_servers", self.mcp_servers.iter())?;
        self.credential.as_ref().map_or(Ok(()), credential)
    }
}

impl Bounded for pb::RecoverExecutionRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        ids(&[
            ("request_id", &self.request_id),
            ("execution_id", &self.execution_id),
            ("control_session_id", &self.control_session_id),
        ])?;
        self.credential.as_ref().map_or(Ok(()), credential)
    }
}

impl Bounded for pb::StartTurnRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        ids(&[("request_id", &self.request_id), ("execution_id", &self.execution_id)])
    }
}

impl Bounded for pb::CancelTurnRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        ids(&[
            ("request_id", &self.request_id),
            ("execution_id", &self.execution_id),
            ("turn_id", &self.turn_id),
        ])
    }
}

impl Bounded for pb::CloseExecutionRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        ids(&[("request_id", &self.request_id), ("execution_id", &self.execution_id)])
    }
}

impl Bounded for pb::SetModelRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        ids(&[("request_id", &self.request_id), ("execution_id", &self.execution_id)])?;
        at_most("model", &self.model, MAX_NAME_BYTES)?;
        names("model_parameters", self.model_parameters.keys())?;
        names("model_parameters", self.model_parameters.values())
    }
}

impl Bounded for pb::SetModeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        ids(&[("request_id", &self.request_id), ("execution_id", &self.execution_id)])?;
        at_most("mode", &self.mode, MAX_NAME_BYTES)
    }
}

impl Bounded for pb::SetConfigOptionRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        ids(&[("request_id", &self.request_id), ("execution_id", &self.execution_id)])?;
        at_most("config_id", &self.config_id, MAX_NAME_BYTES)?;
        at_most("value", &self.value, MAX_NAME_BYTES)
    }
}

impl Bounded for pb::AnswerInteractionRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        use pb::answer_interaction_request::Answer;
        ids(&[
            ("request_id", &self.request_id),
            ("interaction_id", &self.interaction_id),
            ("etag", &self.etag),
        ])?;
        match &self.answer {
            Some(Answer::Questions(questions)) => {
                entries("questions.selections", questions.selections.len())?;
                for selection in &questions.selections {
                    at_most(
                        "questions.selections.question_id",
                        &selection.question_id,
                        MAX_NAME_BYTES,
                    )?;
                    names("questions.selections.option_ids", selection.option_ids.iter())?;
                }
                Ok(())
            }
            Some(Answer::Decline(decline)) => at_most("decline.reason", &decline.reason, MAX_REASON_BYTES),
            Some(Answer::Plan(plan)) => match &plan.decision {
                Some(pb::plan_answer::Decision::Accept(accept)) => {
                    at_most("plan.accept.feedback", &accept.feedback, MAX_REASON_BYTES)
                }
                Some(pb::plan_answer::Decision::Reject(reject)) => {
                    at_most("plan.reject.reason", &reject.reason, MAX_REASON_BYTES)
                }
                None => Ok(()),
            },
            Some(Answer::Permission(permission)) => {
                at_most("permission.option_id", &permission.option_id, MAX_NAME_BYTES)
            }
            Some(Answer::Cancel(_)) | None => Ok(()),
        }
    }
}

/// Reads of one resource by id.
macro_rules! bounded_by_ids {
    ($($message:ident { $($field:ident),+ }),+ $(,)?) => {
        $(impl Bounded for pb::$message {
            fn check_bounds(&self) -> Result<(), Status> {
                ids(&[$((stringify!($field), &self.$field)),+])
            }
        })+
    };
}

bounded_by_ids! {
    GetExecutionRequest { execution_id },
    ListExecutionsRequest { page_token },
    StreamEventsRequest { execution_id },
    AckEventsRequest { execution_id },
    ListTurnsRequest { execution_id, page_token },
    ListInteractionsRequest { execution_id, page_token },
    GetInteractionRequest { interaction_id },
    ListSessionsRequest { page_token },
    ListModelsRequest { execution_id },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_field(status: Status) -> (tonic::Code, String) {
        let details = tonic_types::StatusExt::get_error_details(&status);
        let info = details.error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "FIELD_TOO_LONG");
        (status.code(), info.metadata["field"].clone())
    }

    #[test]
    fn an_id_exactly_at_its_bound_is_taken_and_one_byte_more_is_refused_naming_the_field() {
        let mut request = pb::StartTurnRequest {
            request_id: "r".repeat(MAX_ID_BYTES),
            ..Default::default()
        };
        assert!(request.check_bounds().is_ok());
        request.request_id.push('r');
        assert_eq!(
            refused_field(request.check_bounds().unwrap_err()),
            (tonic::Code::InvalidArgument, "request_id".to_owned())
        );
    }

    #[test]
    fn a_reason_exactly_at_its_bound_is_taken_and_one_byte_more_is_refused() {
        let answer = |reason: String| pb::AnswerInteractionRequest {
            answer: Some(pb::answer_interaction_request::Answer::Decline(pb::DeclineAnswer {
                reason,
            })),
            ..Default::default()
        };
        assert!(answer("x".repeat(MAX_REASON_BYTES)).check_bounds().is_ok());
        assert_eq!(
            refused_field(answer("x".repeat(MAX_REASON_BYTES + 1)).check_bounds().unwrap_err()).1,
            "decline.reason"
        );
    }

    #[test]
    fn an_id_holding_a_control_character_is_refused_naming_the_field() {
        for id in ["a\0b", "a\u{1b}b", "a\u{7f}b"] {
            let status = pb::GetInteractionRequest {
                interaction_id: id.into(),
            }
            .check_bounds()
            .unwrap_err();
            let details = tonic_types::StatusExt::get_error_details(&status);
            let info = details.error_info().expect("ErrorInfo");
            assert_eq!(
                (status.code(), info.reason.as_str()),
                (tonic::Code::InvalidArgument, "INVALID_ARGUMENT")
            );
            assert_eq!(info.metadata["field"], "interaction_id");
        }
        let printable = pb::GetInteractionRequest {
            interaction_id: "0190-é-✓".into(),
        };
        assert!(printable.check_bounds().is_ok());
    }

    #[test]
    fn bounds_count_bytes_not_characters() {
        let request = pb::GetExecutionRequest {
            execution_id: "é".repeat(MAX_ID_BYTES / 2 + 1),
        };
        assert_eq!(refused_field(request.check_bounds().unwrap_err()).1, "execution_id");
    }

    #[test]
    fn a_workspace_a_secret_and_a_list_each_have_their_bound() {
        let mut create = pb::CreateExecutionRequest {
            workspace: "/".repeat(MAX_PATH_BYTES),
            mcp_servers: vec!["s".into(); MAX_ENTRIES],
            credential: Some(pb::CredentialBinding {
                secret: "k".repeat(MAX_SECRET_BYTES),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(create.check_bounds().is_ok());
        create.mcp_servers.push("s".into());
        assert_eq!(refused_field(create.check_bounds().unwrap_err()).1, "mcp_servers");
        create.mcp_servers.pop();
        create.workspace.push('/');
        assert_eq!(refused_field(create.check_bounds().unwrap_err()).1, "workspace");
        create.workspace.pop();
        if let Some(c) = create.credential.as_mut() {
            c.secret.push('k');
        }
        let refused = create.check_bounds().unwrap_err();
        assert!(!refused.message().contains("kkkk"), "the secret is not echoed");
        assert_eq!(refused_field(refused).1, "credential.secret");
    }
}
