//! The calls on one execution's actor, and the reads of executions, turns, sessions and
//! interactions.

use std::sync::Arc;

use cursor_runner_store::{
    ExecutionId, ExecutionRecord, InteractionId, InteractionQuery, InteractionRecord, TurnId, TurnRecord,
};

use super::idempotency::answer_conflict;
use crate::actor::{Command, ConfigChange, Reply};
use crate::attempts::UsageTotal;
use crate::interaction_row::not_pending;
use crate::model_catalog::ModelCatalog;
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::prompt::Prompt;
use cursor_runner_domain::session_config::ConfigRequest;
use cursor_runner_domain::state::InteractionState;

use super::data::*;
use super::idempotency::{KeyClaim, Recorded};

/// Largest page a list call returns.
pub const MAX_PAGE_SIZE: i64 = 500;

/// Page size when the caller names none.
pub const DEFAULT_PAGE_SIZE: i64 = 50;

impl Engine {
    /// The tenant's recorded sessions (`ListSessions`): per session, its newest execution.
    pub async fn list_sessions(
        &self,
        tenant_id: &str,
        page_size: i64,
        page_token: &str,
    ) -> Result<(Vec<ExecutionRecord>, String), EngineError> {
        let limit = page_limit(page_size)?;
        let after = (!page_token.is_empty()).then_some(page_token);
        // A token is a session id this list returned: one of the tenant's sessions.
        if let Some(session_id) = after
            && self.store.find_session(tenant_id, session_id).await?.is_none()
        {
            return Err(not_a_page_token());
        }
        let page = self.store.list_sessions(tenant_id, after, limit).await?;
        let next = if page.len() as i64 == limit {
            page.last().and_then(|e| e.session_id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok((page, next))
    }

    pub async fn get_execution(&self, tenant_id: &str, id: &ExecutionId) -> Result<ExecutionRecord, EngineError> {
        self.store
            .get_execution(tenant_id, id)
            .await?
            .ok_or_else(|| EngineError::not_found(Reason::ExecutionNotFound, format!("execution `{id}` not found")))
    }

    pub async fn list_executions(
        &self,
        tenant_id: &str,
        page_size: i64,
        page_token: &str,
    ) -> Result<(Vec<ExecutionRecord>, String), EngineError> {
        let limit = page_limit(page_size)?;
        let after = id_token(page_token)?;
        let page = self.store.list_executions(tenant_id, after, limit).await?;
        let next = next_token(&page, limit, |e| e.id.as_str());
        Ok((page, next))
    }

    /// A page of the execution's turns (its attempts, each attributed), and the usage
    /// summed over all of them — unknown where any turn's is unknown.
    pub async fn list_turns(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        page_size: i64,
        page_token: &str,
    ) -> Result<(Vec<TurnRecord>, String, UsageTotal), EngineError> {
        let execution = self.get_execution(tenant_id, execution_id).await?;
        let limit = page_limit(page_size)?;
        // A token is the number of a turn this list returned: one the execution has.
        let after = match page_token {
            "" => 0,
            token => match token.parse::<i64>() {
                Ok(number) if (1..=execution.turn_count).contains(&number) => number,
                _ => return Err(not_a_page_token()),
            },
        };
        let page = self.store.list_turns(tenant_id, execution_id, after, limit).await?;
        let next = if page.len() as i64 == limit {
            page.last().map(|t| t.turn_number.to_string()).unwrap_or_default()
        } else {
            String::new()
        };
        let mut all = Vec::new();
        loop {
            let after = all.last().map_or(0, |t: &TurnRecord| t.turn_number);
            let batch = self.store.list_turns(tenant_id, execution_id, after, 500).await?;
            let done = batch.len() < 500;
            all.extend(batch);
            if done {
                break;
            }
        }
        Ok((page, next, UsageTotal::of(&all)))
    }

    pub async fn start_turn(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &ExecutionId,
        prompt: Prompt,
        replace_active: bool,
    ) -> Result<TurnRecord, EngineError> {
        // A replacement cancels the running turn before its own commit, so its key is
        // claimed first; a plain start changes nothing before the commit that starts it.
        let claim = if replace_active {
            KeyClaim::Before
        } else {
            KeyClaim::InFirstCommit
        };
        let tenant_id = meta.tenant_id.clone();
        let engine = self.clone();
        let id = execution_id.to_owned();
        self.idempotent_record_keyed(meta, "StartTurn", claim, move |key| async move {
            engine
                .ask_actor(&tenant_id, &id, |reply| Command::StartTurn {
                    prompt,
                    replace_active,
                    key,
                    reply,
                })
                .await
        })
        .await
    }

    pub async fn cancel_turn(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &ExecutionId,
        turn_id: &str,
    ) -> Result<TurnRecord, EngineError> {
        let tenant_id = meta.tenant_id.clone();
        let named = turn_id.to_owned();
        let cancelled = self
            .actor_call(meta, "CancelTurn", execution_id, move |reply| Command::CancelTurn {
                turn_id: named,
                reply,
            })
            .await;
        match cancelled {
            Err(refusal) if refusal.reason == Reason::NoActiveTurn => {
                Err(self.not_running(&tenant_id, execution_id, turn_id, refusal).await)
            }
            other => other,
        }
    }

    /// Why a turn named to be cancelled is not running: the execution has no turn of that id
    /// (`TURN_NOT_FOUND`), or it is not the running one (`refusal`).
    async fn not_running(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        turn_id: &str,
        refusal: EngineError,
    ) -> EngineError {
        match self.store.get_turn(tenant_id, &TurnId::from(turn_id)).await {
            Ok(Some(turn)) if turn.execution_id == *execution_id => refusal,
            Ok(_) => EngineError::not_found(
                Reason::TurnNotFound,
                format!("execution `{execution_id}` has no turn `{turn_id}`"),
            ),
            // The store's state is for the next call to report; this one says what it knows.
            Err(_) => refusal,
        }
    }

    pub async fn close_execution(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &ExecutionId,
    ) -> Result<ExecutionRecord, EngineError> {
        let tenant_id = meta.tenant_id.clone();
        let engine = self.clone();
        let id = execution_id.to_owned();
        self.idempotent_record(meta, "CloseExecution", move || async move {
            let record = engine.get_execution(&tenant_id, &id).await?;
            if record.state.is_terminal() {
                return Ok(record);
            }
            engine
                .ask_actor(&tenant_id, &id, |reply| Command::Close { reply })
                .await
        })
        .await
    }

    /// A command on the execution's actor, run once per request id (see
    /// [`Self::idempotent_record`]).
    async fn actor_call<T: Recorded>(
        self: &Arc<Self>,
        meta: RequestMeta,
        operation: &str,
        execution_id: &ExecutionId,
        command: impl FnOnce(Reply<T>) -> Command + Send + 'static,
    ) -> Result<T, EngineError> {
        let tenant_id = meta.tenant_id.clone();
        let engine = self.clone();
        let id = execution_id.to_owned();
        self.idempotent_record(meta, operation, move || async move {
            engine.ask_actor(&tenant_id, &id, command).await
        })
        .await
    }

    /// `SetModel` / `SetMode`: between turns, each echo checked.
    pub async fn configure_session(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &ExecutionId,
        request: ConfigRequest,
    ) -> Result<ExecutionRecord, EngineError> {
        request.validate()?;
        if request.steps().is_empty() {
            return Err(EngineError::invalid(Reason::InvalidArgument, "name a model or a mode"));
        }
        self.change_config(meta, "ConfigureSession", execution_id, ConfigChange::Request(request))
            .await
    }

    /// `SetConfigOption`: one option by id, its value checked against what the agent
    /// offers and its echo.
    pub async fn set_config_option(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &ExecutionId,
        config_id: String,
        value: String,
    ) -> Result<ExecutionRecord, EngineError> {
        cursor_runner_domain::session_config::config_text("config_id", &config_id)?;
        cursor_runner_domain::session_config::config_text("value", &value)?;
        self.change_config(
            meta,
            "SetConfigOption",
            execution_id,
            ConfigChange::Option { config_id, value },
        )
        .await
    }

    pub(super) async fn change_config(
        self: &Arc<Self>,
        meta: RequestMeta,
        operation: &str,
        execution_id: &ExecutionId,
        change: ConfigChange,
    ) -> Result<ExecutionRecord, EngineError> {
        self.actor_call(meta, operation, execution_id, move |reply| Command::Configure {
            change,
            reply,
        })
        .await
    }

    /// The agent's model catalog (`ListModels`).
    pub async fn list_models(&self, tenant_id: &str, execution_id: &ExecutionId) -> Result<ModelCatalog, EngineError> {
        self.ask_actor(tenant_id, execution_id, |reply| Command::ListModels { reply })
            .await
    }

    pub async fn get_interaction(&self, tenant_id: &str, id: &InteractionId) -> Result<InteractionRecord, EngineError> {
        self.store
            .get_interaction(tenant_id, id)
            .await?
            .ok_or_else(|| EngineError::not_found(Reason::InteractionNotFound, format!("interaction `{id}` not found")))
    }

    pub async fn list_interactions(
        &self,
        tenant_id: &str,
        execution_id: Option<ExecutionId>,
        state: Option<String>,
        page_size: i64,
        page_token: &str,
    ) -> Result<(Vec<InteractionRecord>, String), EngineError> {
        let state = match state.as_deref() {
            None => None,
            Some(text) => Some(
                InteractionState::parse(text)
                    .ok_or_else(|| EngineError::invalid(Reason::InvalidArgument, format!("unknown state `{text}`")))?,
            ),
        };
        let limit = page_limit(page_size)?;
        let after_id = id_token(page_token)?.map(InteractionId::from);
        let page = self
            .store
            .list_interactions(&InteractionQuery {
                tenant_id: tenant_id.to_owned(),
                execution_id,
                state,
                after_id,
                limit,
            })
            .await?;
        let next = next_token(&page, limit, |i| i.id.as_str());
        Ok((page, next))
    }

    /// The execution whose actor here holds the tenant's interaction pending: an answer to it
    /// needs no read to find its way ([`AnswerTarget::PendingHere`]).
    pub fn pending_here(&self, tenant_id: &str, interaction_id: &str) -> Option<ExecutionId> {
        self.answerable.execution_of(tenant_id, interaction_id)
    }

    /// Answers the interaction `target` names.
    pub async fn answer_interaction(
        self: &Arc<Self>,
        meta: RequestMeta,
        target: AnswerTarget,
        command: AnswerCommand,
    ) -> Result<InteractionRecord, EngineError> {
        let execution_id = match target {
            AnswerTarget::Read(record) => {
                if let Some(outcome) = answered_by_this_request_id(&meta, &record, &command) {
                    return outcome;
                }
                record.execution_id
            }
            AnswerTarget::PendingHere { execution_id } => execution_id,
        };
        let tenant_id = meta.tenant_id.clone();
        let engine = self.clone();
        let answered = self
            // Nothing reaches the agent before the `answered` commit, which claims the key.
            .idempotent_record_keyed(
                meta.clone(),
                "AnswerInteraction",
                KeyClaim::InFirstCommit,
                move |key| async move {
                    let answered = engine
                        .ask_actor(&tenant_id, &execution_id, |reply| Command::Answer {
                            tenant_id: tenant_id.clone(),
                            interaction_id: command.interaction_id.clone(),
                            etag: command.etag,
                            request_id: meta.request_id,
                            answer: command.answer,
                            key,
                            reply,
                        })
                        .await;
                    match answered {
                        // Refused as not pending only when it is not: one still pending lives
                        // on another replica (the refusal names it) or waits for a recovery.
                        Err(e) if e.reason == Reason::ExecutionNotReady => {
                            let now = engine.get_interaction(&tenant_id, &command.interaction_id).await?;
                            Err(match now.state {
                                InteractionState::Pending => e,
                                _ => not_pending(&now),
                            })
                        }
                        other => other,
                    }
                },
            )
            .await?;
        answer_outcome(answered)
    }
}

/// A retry of the answer that won gets what the winner got, once the winner has finished:
/// OK only if the answer reached the pipe, else the refusal naming the state it ended in.
/// While it is `answered` the winner is still on its way to the pipe, so the retry joins it
/// (`None`) and returns what the winner returns.
fn answered_by_this_request_id(
    meta: &RequestMeta,
    record: &InteractionRecord,
    command: &AnswerCommand,
) -> Option<Result<InteractionRecord, EngineError>> {
    if record.answer_request_id.as_deref() != Some(meta.request_id.as_str())
        || record.state == InteractionState::Answered
    {
        return None;
    }
    Some(
        if record.answer_fingerprint.as_deref() == Some(command.answer.fingerprint().as_str()) {
            answer_outcome(record.clone())
        } else {
            Err(answer_conflict())
        },
    )
}

/// What an answer's call returns, read from where its interaction ended: an answer is
/// acknowledged only once it is on the agent's pipe.
fn answer_outcome(record: InteractionRecord) -> Result<InteractionRecord, EngineError> {
    match record.state {
        InteractionState::Delivered => Ok(record),
        _ => Err(not_pending(&record)),
    }
}

fn page_limit(page_size: i64) -> Result<i64, EngineError> {
    match page_size {
        0 => Ok(DEFAULT_PAGE_SIZE),
        n if n < 0 => Err(EngineError::invalid(
            Reason::InvalidArgument,
            "page_size must not be negative",
        )),
        n => Ok(n.min(MAX_PAGE_SIZE)),
    }
}

/// A page token of a list keyed by ids: the last id of the previous page (ids are UUIDs),
/// or none for the first page. Anything else was never returned by a list call.
fn id_token(page_token: &str) -> Result<Option<&str>, EngineError> {
    match page_token {
        "" => Ok(None),
        token if uuid::Uuid::try_parse(token).is_ok() => Ok(Some(token)),
        _ => Err(not_a_page_token()),
    }
}

fn not_a_page_token() -> EngineError {
    EngineError::invalid(Reason::InvalidArgument, "page_token is not one this call returned")
}

fn next_token<T>(page: &[T], limit: i64, id: impl Fn(&T) -> &str) -> String {
    if page.len() as i64 == limit {
        page.last().map(|last| id(last).to_owned()).unwrap_or_default()
    } else {
        String::new()
    }
}
