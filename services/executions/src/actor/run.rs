//! The actor's loop: one command, agent message, timer or workspace violation at a time.

use cursor_runner_acp::{Inbound, InboundStream};
use cursor_runner_activity::*;
use cursor_runner_supervisor::workspace_watch::{Violation, WorkspaceWatcher};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::ViolationAction;
use crate::machine::drain::{DrainEffect, DrainInput};
use crate::machine::turn::CancelCause;
use crate::ownership;
use crate::policy::policy_refusal;
use cursor_runner_domain::error::EngineError;
use cursor_runner_pool::WarmProcess;

use super::data::*;
use super::inbound::Arrived;
use super::timers::{Timer, TimerState, TurnTimers};

impl Actor {
    /// What the timers follow from, read off the actor's state.
    fn timers(&self) -> TimerState {
        TimerState {
            turn: self.turn.as_ref().map(|t| TurnTimers {
                cancel_deadline: t.lifecycle.phase().grace_ends(),
                bound: t.lifecycle.phase().bound().map(|(at, _)| at),
                last_activity: t.last_activity,
            }),
            handoffs: self
                .pending
                .values()
                .filter(|live| live.interaction.kind() != InteractionKind::Permission)
                .map(|live| live.interaction.handoff_at())
                .collect(),
            waiting_on_human: !self.pending.is_empty(),
            drain: self.drain.deadline(),
            idle_limit: self.config.turn_idle_timeout,
        }
    }

    async fn on_timer(&mut self, timer: Timer) -> Result<Ending, EngineError> {
        match timer {
            Timer::CancelGrace => self.on_cancel_timeout().await,
            Timer::Handoff => self.on_handoff_due().await,
            Timer::Drain => self.on_drain_deadline().await,
            Timer::TurnBound => self.on_turn_bound().await,
            Timer::TurnIdle => self.on_turn_idle().await,
        }
    }

    pub(super) async fn run(
        mut self,
        mut commands: mpsc::Receiver<(Command, tracing::Span)>,
        mut inbound: InboundStream,
        mut violations: Option<mpsc::UnboundedReceiver<Violation>>,
    ) {
        let mut lease = self.store.lease();
        let append_failed = self.events.append_failed();
        loop {
            let waiting_on_human = !self.pending.is_empty();
            let timer = self.timers().next();
            // What the agent sends during a turn is handled inside the turn's span.
            let turn_span = self.turn.as_ref().map_or_else(tracing::Span::none, |t| t.span.clone());
            let ending = tokio::select! {
                Some((command, span)) = commands.recv() => self.on_command(command).instrument(span).await,
                message = inbound.recv() => {
                    self.touch_turn();
                    match message {
                        Some(Inbound::Closed { .. }) | None => self.on_process_lost().instrument(turn_span.clone()).await,
                        Some(message) => match Arrived::from(message) {
                            Arrived::Update(update) => self.on_updates(update, &mut inbound).instrument(turn_span.clone()).await,
                            Arrived::Other(message) => self.on_inbound(message).instrument(turn_span.clone()).await,
                        },
                    }
                },
                timer = due(timer) => self.on_timer(timer).await,
                // An append behind the actor failed while the agent is quiet: say so now.
                () = append_failed.notified() => self.events.flush().await.map(|()| Ending::Continue),
                Some(violation) = next_violation(&mut violations) => self.on_workspace_violation(violation).await,
                // This replica's lease ended: every write would be refused; stop below.
                () = ownership::lease_ended(&mut lease) => Ok(Ending::Continue),
            };
            if waiting_on_human {
                self.touch_turn();
            }
            // An append behind the actor failed, and a write that waited for it (a
            // command's, say) only told its own caller: its events are lost, so the
            // execution fails as it would have had the append been waited for.
            let ending = match (ending, self.events.take_lost_append()) {
                (Ok(_), Some(lost)) => Err(lost),
                (ending, _) => ending,
            };
            if self.events.is_fenced() || ownership::lease_has_ended(&lease) {
                self.stop_fenced().await;
                break;
            }
            let ending = match ending {
                Ok(Ending::Continue) => self.close_if_drained().await,
                other => other,
            };
            match ending {
                Ok(Ending::Continue) => {}
                Ok(Ending::Stop) => break,
                Err(e) => {
                    self.fail(e).await;
                    break;
                }
            }
        }
        // Refuse what is still queued: the execution is over.
        if let Some((_, reply)) = self.queued_reply.take() {
            let _ = reply.send(Err(self.refusal()));
        }
        for reply in std::mem::take(&mut self.drain_replies) {
            let _ = reply.send(Ok(self.record.clone()));
        }
        commands.close();
        while let Some((command, _)) = commands.recv().await {
            self.refuse(command);
        }
        self.release(inbound);
    }

    /// After the loop: a process the pool takes back serves another session; any other
    /// was stopped already, and its slot ends with its ticket.
    pub(super) fn release(self, inbound: InboundStream) {
        let Some(ticket) = self.ticket else { return };
        if !self.reuse {
            return;
        }
        let warm = WarmProcess {
            process: self.process,
            connection: self.connection,
            inbound,
            timings: Default::default(),
            initialized: self.initialized,
            sessions_served: self.sessions_served,
            ticket,
        };
        if let Err(warm) = self.pool.give_back(warm) {
            // Draining began meanwhile: stop it off the actor.
            let grace = self.config.stop_grace;
            tokio::spawn(async move {
                let mut warm = *warm;
                warm.connection.close_stdin().await;
                warm.process.stop(grace).await;
            });
        }
    }

    pub(super) fn refuse(&self, command: Command) {
        let error = || self.refusal();
        match command {
            Command::StartTurn { reply, .. } => drop(reply.send(Err(error()))),
            Command::CancelTurn { reply, .. } => drop(reply.send(Err(error()))),
            Command::Answer { reply, .. } => drop(reply.send(Err(error()))),
            Command::Close { reply } | Command::Drain { reply, .. } => drop(reply.send(Ok(self.record.clone()))),
            Command::Configure { reply, .. } => drop(reply.send(Err(error()))),
            Command::ListModels { reply } => drop(reply.send(Err(error()))),
        }
    }

    pub(super) async fn on_command(&mut self, command: Command) -> Result<Ending, EngineError> {
        tracing::debug!(execution_id = %self.record.id, command = command.name(), "command");
        match command {
            Command::StartTurn {
                prompt,
                replace_active,
                key,
                reply,
            } => self.on_start_turn(prompt, replace_active, key, reply).await?,
            Command::CancelTurn { turn_id, reply } => {
                let result = self.cancel_turn(&turn_id).await;
                let _ = reply.send(result);
            }
            Command::Answer {
                tenant_id,
                interaction_id,
                etag,
                request_id,
                answer,
                key,
                reply,
            } => {
                let result = self
                    .answer((tenant_id, interaction_id), etag, request_id, answer, key)
                    .await;
                let _ = reply.send(result);
            }
            Command::Close { reply } => {
                let result = self.close().await;
                let _ = reply.send(result);
                return Ok(Ending::Stop);
            }
            Command::Configure { change, reply } => {
                let result = self.change_config(change).await;
                let _ = reply.send(result);
            }
            Command::ListModels { reply } => self.list_models(reply),
            Command::Drain { deadline, force, reply } => {
                self.drain_replies.push(reply);
                if let Some(DrainEffect::End) = self.drain.handle(DrainInput::Asked { deadline, force }) {
                    self.end_drained().await?;
                    return Ok(Ending::Stop);
                }
            }
        }
        Ok(Ending::Continue)
    }

    /// Starts watching the workspace for the life of the session; without a watcher
    /// (inotify unavailable) the admission checks still hold and a warning is logged.
    pub(super) fn watch_workspace(&mut self) -> Option<mpsc::UnboundedReceiver<Violation>> {
        let watched = WorkspaceWatcher::global().and_then(|watcher| {
            watcher.watch(
                std::path::Path::new(&self.record.workspace),
                self.config.workspace_policy.clone(),
            )
        });
        match watched {
            Ok((guard, violations)) => {
                self._workspace_watch = Some(guard);
                Some(violations)
            }
            Err(e) => {
                tracing::warn!(execution_id = %self.record.id, error = %e, "continuous workspace protection is off");
                None
            }
        }
    }

    /// The workspace policy again, before every prompt: the watch narrows the race, this
    /// closes it for the next turn (a violation between turns, or one the watch missed).
    pub(super) fn check_workspace(&self) -> Result<(), EngineError> {
        self.config
            .workspace_policy
            .check(std::path::Path::new(&self.record.workspace))
            .map_err(policy_refusal)
    }

    /// Configuration that would load code appeared in the workspace during the session.
    pub(super) async fn on_workspace_violation(&mut self, violation: Violation) -> Result<Ending, EngineError> {
        let stop = self.config.on_workspace_violation == ViolationAction::StopTurn;
        let mut notice = ProviderNotice::warning(
            "workspace_policy_violation",
            NoticeScope::Environment,
            format!("{violation}{}", if stop { "; the turn is stopped" } else { "" }),
        );
        notice.user_actionable = true;
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events
            .emit(turn_id.as_ref(), vec![ActivityPayload::ProviderNotice(notice)])
            .await?;
        if stop && let Some(turn_id) = self.running_turn_id() {
            self.cancel_turn_with(&turn_id, CancelCause::WorkspacePolicy).await?;
        }
        Ok(Ending::Continue)
    }
}

async fn next_violation(violations: &mut Option<mpsc::UnboundedReceiver<Violation>>) -> Option<Violation> {
    match violations {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The armed timer, once it is due; never, with none armed.
async fn due(timer: Option<(Instant, Timer)>) -> Timer {
    match timer {
        Some((at, timer)) => {
            tokio::time::sleep_until(at).await;
            timer
        }
        None => std::future::pending().await,
    }
}
