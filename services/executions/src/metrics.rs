//! Prometheus metrics (OpenMetrics text). Label values are small closed sets —
//! never an execution, turn, interaction or tenant id. Most counters move from the
//! one place every canonical event passes after its commit ([`Metrics::observe`]),
//! so a metric never counts something the outbox does not hold.

use cursor_runner_activity::{ActivityPayload, EVENT_TYPES, InteractionKind};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::error::Reason;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabel {
    pub family: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindStateLabels {
    pub kind: &'static str,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnsweredByLabel {
    pub answered_by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// The registry and every metric family of one engine.
pub struct Metrics {
    registry: Registry,
    turns_started: Counter,
    turns_settled: Family<StateLabel, Counter>,
    events_appended: Family<FamilyLabel, Counter>,
    interactions_created: Family<KindLabel, Counter>,
    interactions_ended: Family<KindStateLabels, Counter>,
    answers_delivered: Family<AnsweredByLabel, Counter>,
    process_starts: Counter,
    process_exits: Family<CauseLabel, Counter>,
    launches_refused: Family<ReasonLabel, Counter>,
    executions_live: Gauge,
    event_streams_open: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("cursor_runner");
        let turns_started = Counter::default();
        registry.register("turns_started", "Turns started", turns_started.clone());
        let turns_settled = Family::<StateLabel, Counter>::default();
        registry.register(
            "turns_settled",
            "Turns settled, by terminal state (completed, cancelled, interrupted, failed)",
            turns_settled.clone(),
        );
        let events_appended = Family::<FamilyLabel, Counter>::default();
        registry.register(
            "events_appended",
            "Canonical events committed to the outbox, by event family (the eventType before its last dot)",
            events_appended.clone(),
        );
        let interactions_created = Family::<KindLabel, Counter>::default();
        registry.register(
            "interactions_created",
            "Interactions recorded and exposed, by kind (question, plan, permission)",
            interactions_created.clone(),
        );
        let interactions_ended = Family::<KindStateLabels, Counter>::default();
        registry.register(
            "interactions_ended",
            "Interactions that reached a terminal state (delivered, cancelled, expired), by kind and state",
            interactions_ended.clone(),
        );
        let answers_delivered = Family::<AnsweredByLabel, Counter>::default();
        registry.register(
            "answers_delivered",
            "Answers written to the agent's stdin, by who answered (human, policy)",
            answers_delivered.clone(),
        );
        let process_starts = Counter::default();
        registry.register("process_starts", "Agent processes spawned", process_starts.clone());
        let process_exits = Family::<CauseLabel, Counter>::default();
        registry.register(
            "process_exits",
            "Agent processes exited, by cause (agent: it exited on its own; runner: the service stopped it)",
            process_exits.clone(),
        );
        let launches_refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "launches_refused",
            "CreateExecution calls that launched no ready agent, by error reason",
            launches_refused.clone(),
        );
        let executions_live = Gauge::default();
        registry.register(
            "executions_live",
            "Executions whose agent process is running",
            executions_live.clone(),
        );
        let event_streams_open = Gauge::default();
        registry.register(
            "event_streams_open",
            "Open StreamEvents subscriptions",
            event_streams_open.clone(),
        );
        Self {
            registry,
            turns_started,
            turns_settled,
            events_appended,
            interactions_created,
            interactions_ended,
            answers_delivered,
            process_starts,
            process_exits,
            launches_refused,
            executions_live,
            event_streams_open,
        }
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    /// Counts one committed event of type `event_type`.
    pub(crate) fn observe(&self, event_type: &str, payload: &ActivityPayload) {
        // The label comes from the closed set, never from the string itself.
        let family = EVENT_TYPES
            .iter()
            .find(|known| **known == event_type)
            .map_or("other", |known| event_family(known));
        self.events_appended.get_or_create(&FamilyLabel { family }).inc();
        match payload {
            ActivityPayload::TurnStarted(_) => {
                self.turns_started.inc();
            }
            ActivityPayload::TurnCompleted(_) => self.turn_settled("completed"),
            ActivityPayload::TurnCancelled(_) => self.turn_settled("cancelled"),
            ActivityPayload::TurnInterrupted(_) => self.turn_settled("interrupted"),
            ActivityPayload::TurnFailed(_) => self.turn_settled("failed"),
            ActivityPayload::RuntimeRequestCreated(created) => {
                self.interactions_created
                    .get_or_create(&KindLabel {
                        kind: kind_label(created.kind),
                    })
                    .inc();
            }
            ActivityPayload::RuntimeRequestResolved(resolved) => {
                self.interaction_ended(resolved.kind, "delivered");
                let answered_by = match resolved.answered_by.as_str() {
                    "human" => "human",
                    "policy" => "policy",
                    _ => "other",
                };
                self.answers_delivered
                    .get_or_create(&AnsweredByLabel { answered_by })
                    .inc();
            }
            ActivityPayload::RuntimeRequestCancelled(ended) => self.interaction_ended(ended.kind, "cancelled"),
            ActivityPayload::RuntimeRequestExpired(ended) => self.interaction_ended(ended.kind, "expired"),
            ActivityPayload::ProcessSpawned(_) => {
                self.process_starts.inc();
                self.executions_live.inc();
            }
            ActivityPayload::ProcessExited(exited) => {
                let cause = match exited.initiated_by.as_str() {
                    "agent" => "agent",
                    "runner" => "runner",
                    _ => "other",
                };
                self.process_exits.get_or_create(&CauseLabel { cause }).inc();
                self.executions_live.dec();
            }
            _ => {}
        }
    }

    pub(crate) fn launch_refused(&self, reason: Reason) {
        self.launches_refused
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// Counts an open event stream until the guard drops.
    pub(crate) fn stream_opened(&self) -> StreamGuard {
        self.event_streams_open.inc();
        StreamGuard(self.event_streams_open.clone())
    }

    fn turn_settled(&self, state: &'static str) {
        self.turns_settled.get_or_create(&StateLabel { state }).inc();
    }

    fn interaction_ended(&self, kind: InteractionKind, state: &'static str) {
        self.interactions_ended
            .get_or_create(&KindStateLabels {
                kind: kind_label(kind),
                state,
            })
            .inc();
    }
}

pub(crate) struct StreamGuard(Gauge);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// `turn.completed` → `turn`, `runtime_request.created` → `runtime_request`,
/// `tool.execution.started` → `tool.execution`.
fn event_family(event_type: &'static str) -> &'static str {
    event_type.rsplit_once('.').map_or(event_type, |(family, _)| family)
}

fn kind_label(kind: InteractionKind) -> &'static str {
    match kind {
        InteractionKind::Question => "question",
        InteractionKind::Plan => "plan",
        InteractionKind::Permission => "permission",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_the_event_type_without_its_last_segment() {
        assert_eq!(event_family("turn.completed"), "turn");
        assert_eq!(event_family("tool.execution.started"), "tool.execution");
        assert_eq!(event_family("runtime_request.created"), "runtime_request");
    }

    #[test]
    fn the_exposition_names_every_family() {
        let metrics = Metrics::new();
        metrics.launch_refused(Reason::WorkspacePolicy);
        let _guard = metrics.stream_opened();
        let text = metrics.encode();
        for name in [
            "cursor_runner_turns_started_total",
            "cursor_runner_launches_refused_total{reason=\"WORKSPACE_POLICY\"} 1",
            "cursor_runner_event_streams_open 1",
            "cursor_runner_executions_live 0",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
