//! What the agent streams: session updates in batches through the turn's normalizer, and Cursor's extension notifications.

use cursor_runner_acp::TryRecvError;
use cursor_runner_acp::cursor::GenerateImageParams;
use cursor_runner_acp::{AcpError, AgentMessage, Inbound, InboundStream, TextChunk, methods};
use cursor_runner_activity::*;
use cursor_runner_supervisor::workspace_paths::workspace_file;
use serde_json::Value;

use crate::events::EventWriter;
use crate::limits::run_takes_more;

use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::settlement::Loss;

use super::data::*;

/// The field audit's label for a field whose name quotes a secret the agent was handed.
const REDACTED_FIELD: &str = "redacted";

impl Actor {
    pub(super) async fn on_inbound(&mut self, message: Inbound) -> Result<Ending, EngineError> {
        match message {
            Inbound::Request(request) => self.on_agent_request(request).await?,
            Inbound::TextChunk(chunk) => {
                let mut payloads = Vec::new();
                self.normalize_update_into(UpdateIn::Chunk(chunk), &mut payloads);
                self.emit_for_turn(payloads).await?;
            }
            Inbound::Notification { method, params } => {
                match AgentMessage::classify(&method, &self.redacted_at_ingress(params)) {
                    AgentMessage::SessionUpdate(update) => {
                        let payloads = self.normalize_redacted_tree(update.params);
                        self.emit_for_turn(payloads).await?;
                    }
                    message if message.is_fire_and_forget() => self.on_extension(&message).await?,
                    _ => {}
                }
            }
            Inbound::Invalid { reason } => {
                self.notice(
                    "protocol_invalid_frame",
                    format!("skipped a malformed line from the agent: {reason}"),
                )
                .await?;
            }
            Inbound::Oversized { bytes } => {
                self.notice(
                    "protocol_oversized_frame",
                    format!("skipped a {bytes}-byte line over the frame bound"),
                )
                .await?;
            }
            Inbound::Response { id, result } => {
                return self.on_prompt_result(id, result.map_err(AcpError::Rpc)).await;
            }
            Inbound::UnmatchedResponse { id } => {
                self.notice(
                    "protocol_unmatched_response",
                    format!("a response to unknown request id {id}"),
                )
                .await?;
            }
            Inbound::Closed { .. } => return self.on_process_lost().await,
            Inbound::StoppedReading { limit } => return self.on_agent_stopped_reading(limit).await,
        }
        Ok(Ending::Continue)
    }

    /// A write to the agent made no progress for the stall limit: an agent that reads
    /// nothing hears no prompt, cancel or answer, so it is stopped and everything live
    /// settles as for a lost agent (pending interactions expire, never re-sent).
    async fn on_agent_stopped_reading(&mut self, limit: std::time::Duration) -> Result<Ending, EngineError> {
        let message = format!("the agent read nothing from its stdin for {limit:?} and was stopped");
        if let Some(ticket) = &self.ticket {
            self.pool
                .record_failure(&ticket.profile_id, Reason::AgentUnresponsive, &message);
        }
        let exit = self.stop_process("runner").await?;
        self.record.exit_code = exit.exit_code.map(i64::from);
        self.record.exit_signal = exit.signal.map(i64::from);
        self.settle_loss(Loss::AgentGone {
            reason: Reason::AgentUnresponsive,
            turn_failure: TurnFailureReason::AgentUnresponsive,
            message,
        })
        .await?;
        Ok(Ending::Stop)
    }

    /// Cursor's fire-and-forget extensions: todos and tasks through the normalizer, a
    /// generated image checked on disk first.
    pub(super) async fn on_extension(&mut self, message: &AgentMessage<'_>) -> Result<(), EngineError> {
        if let AgentMessage::GenerateImage(image) = message {
            return self.on_generated_image(image).await;
        }
        let (turn_id, payloads) = match self.turn.as_mut() {
            Some(turn) => (Some(turn.record.id.clone()), turn.normalizer.on_agent_message(message)),
            None => (None, self.session_normalizer.on_agent_message(message)),
        };
        self.events.emit(turn_id.as_ref(), payloads).await
    }

    /// `cursor/generate_image`: every path is checked on disk (inside the workspace by
    /// real path, a regular file, no symlink) before an event refers to it.
    pub(super) async fn on_generated_image(&mut self, image: &GenerateImageParams) -> Result<(), EngineError> {
        let workspace = std::path::Path::new(&self.record.workspace);
        let mut refused = 0;
        let mut check = |path: &str| match workspace_file(workspace, path) {
            Ok(relative) => Some(relative),
            Err(_) => {
                refused += 1;
                None
            }
        };
        let reference = image.file_path.as_deref().and_then(&mut check);
        let viewed: Vec<String> = image
            .reference_image_paths
            .iter()
            .filter_map(|path| check(path))
            .collect();
        let tool_call_id = image.tool_call_id.as_deref().unwrap_or("unknown");
        let description = image.description.as_deref().unwrap_or_default();
        let payloads = generated_image(tool_call_id, description, reference, viewed, refused);
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events.emit(turn_id.as_ref(), payloads).await
    }

    /// Appends `payloads` for the running turn, or the session's when none runs.
    async fn emit_for_turn(&mut self, payloads: Vec<ActivityPayload>) -> Result<(), EngineError> {
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events.emit(turn_id.as_ref(), payloads).await
    }

    /// A run of `session/update`s is normalized into one outbox append (one commit)
    /// instead of one per update: what already waits in the inbound queue, and, while the
    /// append before this run still commits, what arrives meanwhile (group commit: a
    /// steady agent's updates share a commit instead of each waiting for its own). The
    /// first other message ends the run and is handled after it, so wire order is kept.
    pub(super) async fn on_updates(
        &mut self,
        first: UpdateIn,
        inbound: &mut InboundStream,
    ) -> Result<Ending, EngineError> {
        let mut payloads = Vec::new();
        self.normalize_update_into(first, &mut payloads);
        let mut next = None;
        let (mut updates, mut line_bytes) = (1, 0);
        while run_takes_more(updates, line_bytes) {
            let (message, weight) = match inbound.try_recv_weighed() {
                Ok(weighed) => weighed,
                Err(TryRecvError::Empty) if self.events.is_committing() => {
                    match next_while_committing(&mut self.events, inbound).await {
                        Some(weighed) => weighed,
                        None => break,
                    }
                }
                Err(_) => break,
            };
            line_bytes += weight;
            match Arrived::from(message) {
                Arrived::Update(update) => {
                    updates += 1;
                    self.normalize_update_into(update, &mut payloads);
                }
                Arrived::Other(other) => {
                    next = Some(other);
                    break;
                }
            }
        }
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events.emit_behind(turn_id.as_ref(), payloads).await?;
        match next {
            None => Ok(Ending::Continue),
            Some(Inbound::Closed { .. }) => self.on_process_lost().await,
            Some(message) => self.on_inbound(message).await,
        }
    }

    /// A notification's params with every secret redacted as they come in, before anything
    /// is derived from them: what the normalizer cuts to a bound, strips to a tag, or
    /// copies into an item id or a turn's usage can then carry no part of a secret, which
    /// the outbox's own redaction of whole values would miss.
    pub(super) fn redacted_at_ingress(&self, mut params: Value) -> Value {
        self.events.redactor().redact_json(&mut params);
        params
    }

    /// The events of one `session/update`, for the running turn or the session, redacted
    /// [as it comes in](Self::redacted_at_ingress), pushed onto `out` with each delta joined
    /// to the one before it where they merge ([`push_coalesced`]). The normalizer decides
    /// whose it is: the root session, a child it knows (spawned from its parent in this
    /// turn), or nobody's (suppressed with a notice). A text chunk needs neither a tree nor
    /// the field audit: its shape has no member the normalizer does not read.
    pub(super) fn normalize_update_into(&mut self, update: UpdateIn, out: &mut Vec<ActivityPayload>) {
        let params = match update {
            UpdateIn::Chunk(chunk) => match self.events.redactor().redact_text_chunk(chunk) {
                Ok(chunk) => {
                    return match self.turn.as_mut() {
                        Some(turn) => turn.normalizer.on_text_chunk_into(chunk, out),
                        None => self.session_normalizer.on_text_chunk_into(chunk, out),
                    };
                }
                Err(redacted) => redacted,
            },
            UpdateIn::Tree(params) => self.redacted_at_ingress(params),
        };
        push_coalesced(out, self.normalize_redacted_tree(&params));
    }

    /// The events of one `session/update`'s params, already redacted.
    fn normalize_redacted_tree(&mut self, params: &Value) -> Vec<ActivityPayload> {
        if let (Some(metrics), Some((kind, fields))) = (self.events.metrics(), unconsumed_fields(&params["update"])) {
            for field in fields {
                // A label is public and kept for ever: a name that quoted a secret (redacted
                // as it came in) is not spelled, not even as its marker.
                let quoted_a_secret = self.events.redactor().markers_in_text(field) > 0;
                metrics.unconsumed_field(kind, if quoted_a_secret { REDACTED_FIELD } else { field });
            }
        }
        match self.turn.as_mut() {
            Some(turn) => turn.normalizer.on_session_update(params),
            None => self.session_normalizer.on_session_update(params),
        }
    }
}

/// The next message from the agent if it comes before the append behind the actor has
/// ended, with the bytes it was read from; `None` once it has. A stream that ended reads as the agent's stdout closing
/// (it ends only after saying so).
async fn next_while_committing(events: &mut EventWriter, inbound: &mut InboundStream) -> Option<(Inbound, usize)> {
    tokio::select! {
        biased;
        message = inbound.recv_weighed() => Some(message.unwrap_or((Inbound::Closed { truncated_last_line: false }, 0))),
        () = events.committed() => None,
    }
}

/// One `session/update` as the connection delivered it: a text chunk decoded without a
/// tree, or the params' tree, neither redacted yet.
pub(super) enum UpdateIn {
    Chunk(TextChunk),
    Tree(Value),
}

/// What the agent sent, sorted: a `session/update`, or any other message.
pub(super) enum Arrived {
    Update(UpdateIn),
    Other(Inbound),
}

impl From<Inbound> for Arrived {
    fn from(message: Inbound) -> Self {
        match message {
            Inbound::TextChunk(chunk) => Arrived::Update(UpdateIn::Chunk(chunk)),
            Inbound::Notification { method, params } if method == methods::SESSION_UPDATE => {
                Arrived::Update(UpdateIn::Tree(params))
            }
            other => Arrived::Other(other),
        }
    }
}
