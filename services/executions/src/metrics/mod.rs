//! Prometheus metrics (OpenMetrics text). Label values are small closed sets —
//! never an execution, turn, interaction or tenant id. Most counters move from the
//! one place every canonical event passes after its commit ([`Metrics::observe`]),
//! so a metric never counts something the outbox does not hold.

use cursor_runner_activity::{ActivityPayload, EVENT_TYPES, InteractionKind, audited_update_kinds};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use cursor_runner_domain::error::Reason;

mod fleet;
mod labels;
mod pool;

pub use labels::*;

/// The registry and every metric family of one engine.
pub struct Metrics {
    registry: Registry,
    turns_started: Counter,
    turns_settled: Family<StateLabel, Counter>,
    events_appended: Family<FamilyLabel, Counter>,
    interactions_created: Family<KindLabel, Counter>,
    interactions_ended: Family<KindStateLabels, Counter>,
    answers_delivered: Family<AnsweredByLabel, Counter>,
    process_starts: Family<DistributionLabel, Counter>,
    process_exits: Family<CauseLabel, Counter>,
    launches_refused: Family<ReasonLabel, Counter>,
    executions_live: Gauge,
    event_streams_open: Gauge,
    pool_slots: Family<SlotLabels, Gauge>,
    pool_leases: Family<LeaseKindLabel, Counter>,
    pool_process_starts: Family<OutcomeLabel, Counter>,
    pool_failures: Family<ReasonLabel, Counter>,
    pool_quarantines: Counter,
    lease_duration: Family<LeaseKindLabel, Histogram>,
    fenced_writes: Family<WhatLabel, Counter>,
    events_pruned: Counter,
    fleet: fleet::FleetMetrics,
    turn_duration: Family<StateLabel, Histogram>,
    agent_start: Family<PhaseLabel, Histogram>,
    interaction_wait: Family<KindStateLabels, Histogram>,
    answer_delivery: Histogram,
    outbox_lag: Histogram,
    requests_refused: Family<ReasonLabel, Counter>,
    store_duration: Family<OperationLabel, Histogram>,
    store_errors: Family<OperationLabel, Counter>,
    unconsumed_fields: Family<UpdateFieldLabels, Counter>,
    store_reachable: Gauge,
    draining: Gauge,
    /// The (kind, field) series of `unconsumed_fields` so far: bounded, the rest is `other`.
    unconsumed_series: parking_lot::Mutex<std::collections::HashSet<(&'static str, String)>>,
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
        let process_starts = Family::<DistributionLabel, Counter>::default();
        registry.register(
            "process_starts",
            "Agent processes spawned, by distribution: pinned (a verified closure) or unpinned (a development command)",
            process_starts.clone(),
        );
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
        let pool_slots = Family::<SlotLabels, Gauge>::default();
        registry.register(
            "pool_slots",
            "Pool slots (agent processes) by state (warming, idle, leased, draining) and profile origin (configured, learned)",
            pool_slots.clone(),
        );
        let pool_leases = Family::<LeaseKindLabel, Counter>::default();
        registry.register(
            "pool_leases",
            "Processes leased to executions, by kind (warm: an idle slot; cold: started for the lease)",
            pool_leases.clone(),
        );
        let pool_process_starts = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "pool_process_starts",
            "Agent processes the pool started (launch + initialize), by outcome (ready, failed)",
            pool_process_starts.clone(),
        );
        let pool_failures = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "pool_failures",
            "Agent failures counted against a profile's restart intensity, by reason",
            pool_failures.clone(),
        );
        let pool_quarantines = Counter::default();
        registry.register(
            "pool_quarantines",
            "Profiles quarantined after exceeding the restart intensity",
            pool_quarantines.clone(),
        );
        let lease_duration =
            Family::<LeaseKindLabel, Histogram>::new_with_constructor(|| Histogram::new(LEASE_BUCKETS.iter().copied()));
        registry.register(
            "lease_duration_seconds",
            "From admission to a process ready for session/new (a cold lease includes spawn and initialize), by kind",
            lease_duration.clone(),
        );
        let fenced_writes = Family::<WhatLabel, Counter>::default();
        registry.register(
            "fenced_writes",
            "Writes refused because they carried a superseded generation or fence, by what (event, execution, answer; etag: an answer echoing a superseded or unknown etag)",
            fenced_writes.clone(),
        );
        let turn_duration = Family::<StateLabel, Histogram>::new_with_constructor(turn_histogram);
        registry.register(
            "turn_duration_seconds",
            "Wall-clock time from a turn's start to its settlement, by terminal state",
            turn_duration.clone(),
        );
        let agent_start = Family::<PhaseLabel, Histogram>::new_with_constructor(lease_histogram);
        registry.register(
            "agent_start_seconds",
            "Starting an agent process, by phase: spawn (the process exists) and initialize (ACP handshake)",
            agent_start.clone(),
        );
        let interaction_wait = Family::<KindStateLabels, Histogram>::new_with_constructor(wait_histogram);
        registry.register(
            "interaction_wait_seconds",
            "How long an interaction was pending before it ended, by kind and terminal state",
            interaction_wait.clone(),
        );
        let answer_delivery = Histogram::new(FAST_BUCKETS.iter().copied());
        registry.register(
            "answer_delivery_seconds",
            "From an answer's arrival at the execution to its flushed write on the agent's stdin",
            answer_delivery.clone(),
        );
        let outbox_lag = Histogram::new(LAG_BUCKETS.iter().copied());
        registry.register(
            "outbox_lag_events",
            "Events between each live execution's head and the control plane's acknowledgement, sampled periodically",
            outbox_lag.clone(),
        );
        let requests_refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "requests_refused",
            "Calls refused with a typed reason (oversize and invalid input, forged or stale answers, fences, authentication, policy), by reason",
            requests_refused.clone(),
        );
        let store_duration = Family::<OperationLabel, Histogram>::new_with_constructor(fast_histogram);
        registry.register(
            "store_operation_duration_seconds",
            "Store operations, by the store method",
            store_duration.clone(),
        );
        let store_errors = Family::<OperationLabel, Counter>::default();
        registry.register(
            "store_errors",
            "Store operations that failed, by the store method",
            store_errors.clone(),
        );
        let unconsumed_fields = Family::<UpdateFieldLabels, Counter>::default();
        registry.register(
            "unconsumed_fields",
            "Top-level fields of session/update kinds the normalizer does not read (a new Cursor build's extras), by kind and field",
            unconsumed_fields.clone(),
        );
        let build_info = Family::<VersionLabel, Gauge>::default();
        build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("build_info", "The running build (always 1)", build_info);
        let events_pruned = Counter::default();
        registry.register(
            "events_pruned",
            "Acknowledged events past the retention period deleted from the outbox",
            events_pruned.clone(),
        );
        let fleet = fleet::FleetMetrics::registered(&mut registry);
        let store_reachable = Gauge::default();
        registry.register(
            "store_reachable",
            "1 while the store answers the health probe's ping in time, 0 while it does not (0 until the first ping)",
            store_reachable.clone(),
        );
        let draining = Gauge::default();
        registry.register(
            "draining",
            "1 once a drain (SIGTERM or AdminService.Drain) or shutdown has begun, else 0",
            draining.clone(),
        );
        // Series of closed label sets exist from the start at zero, so a dashboard shows 0
        // (and `rate()` works from the first scrape) rather than "no data" until the first event.
        for state in cursor_runner_domain::state::SlotState::ALL
            .iter()
            .filter(|s| **s != cursor_runner_domain::state::SlotState::Stopped)
        {
            for origin in cursor_runner_domain::state::ProfileOrigin::ALL {
                let labels = SlotLabels {
                    state: state.as_str(),
                    profile: origin.as_str(),
                };
                pool_slots.get_or_create(&labels).set(0);
            }
        }
        for state in SETTLED_STATES {
            turns_settled.get_or_create(&StateLabel { state }).inc_by(0);
        }
        for cause in ["agent", "runner", "other"] {
            process_exits.get_or_create(&CauseLabel { cause }).inc_by(0);
        }
        for distribution in ["pinned", "unpinned"] {
            process_starts
                .get_or_create(&DistributionLabel { distribution })
                .inc_by(0);
        }
        for kind in ["warm", "cold"] {
            pool_leases.get_or_create(&LeaseKindLabel { kind }).inc_by(0);
        }
        for outcome in ["ready", "failed"] {
            pool_process_starts.get_or_create(&OutcomeLabel { outcome }).inc_by(0);
        }
        for what in ["execution", "turn", "interaction", "answer", "event", "etag"] {
            fenced_writes.get_or_create(&WhatLabel { what }).inc_by(0);
        }
        for family in EVENT_TYPES.iter().map(|t| event_family(t)).chain(["other"]) {
            events_appended.get_or_create(&FamilyLabel { family }).inc_by(0);
        }
        for kind in INTERACTION_KINDS {
            interactions_created.get_or_create(&KindLabel { kind }).inc_by(0);
            for state in INTERACTION_END_STATES {
                interactions_ended
                    .get_or_create(&KindStateLabels { kind, state })
                    .inc_by(0);
                let _ = interaction_wait.get_or_create(&KindStateLabels { kind, state });
            }
        }
        for answered_by in ["human", "policy", "other"] {
            answers_delivered
                .get_or_create(&AnsweredByLabel { answered_by })
                .inc_by(0);
        }
        // Reasons are the error catalog: a closed set, so every one starts at 0 and the
        // first refusal of a kind is an increase an alert's `increase()` sees.
        for reason in Reason::ALL.iter().map(|r| r.as_str()) {
            launches_refused.get_or_create(&ReasonLabel { reason }).inc_by(0);
            pool_failures.get_or_create(&ReasonLabel { reason }).inc_by(0);
            requests_refused.get_or_create(&ReasonLabel { reason }).inc_by(0);
        }
        for kind in ["warm", "cold"] {
            let _ = lease_duration.get_or_create(&LeaseKindLabel { kind });
        }
        for phase in ["spawn", "initialize"] {
            let _ = agent_start.get_or_create(&PhaseLabel { phase });
        }
        for state in SETTLED_STATES {
            let _ = turn_duration.get_or_create(&StateLabel { state });
        }
        // Field names come from the agent (an open set); `other` of each audited kind is
        // the one series known in advance.
        for update_kind in audited_update_kinds() {
            unconsumed_fields
                .get_or_create(&UpdateFieldLabels {
                    update_kind,
                    field: "other".into(),
                })
                .inc_by(0);
        }
        Self {
            store_reachable,
            draining,
            unconsumed_fields,
            unconsumed_series: parking_lot::Mutex::new(std::collections::HashSet::new()),
            events_pruned,
            fleet,
            turn_duration,
            agent_start,
            interaction_wait,
            answer_delivery,
            outbox_lag,
            requests_refused,
            store_duration,
            store_errors,
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
            pool_slots,
            pool_leases,
            pool_process_starts,
            pool_failures,
            pool_quarantines,
            lease_duration,
            fenced_writes,
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
            ActivityPayload::ProcessSpawned(spawned) => {
                let distribution = if spawned.distribution == "unpinned" {
                    "unpinned"
                } else {
                    "pinned"
                };
                self.process_starts
                    .get_or_create(&DistributionLabel { distribution })
                    .inc();
                self.executions_live.inc();
            }
            ActivityPayload::ProcessReleased(_) => {
                self.executions_live.dec();
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

    pub(crate) fn turn_settled_after(&self, state: &'static str, took: std::time::Duration) {
        self.turn_duration
            .get_or_create(&StateLabel { state })
            .observe(took.as_secs_f64());
    }

    fn agent_started(&self, spawn: std::time::Duration, initialize: std::time::Duration) {
        self.agent_start
            .get_or_create(&PhaseLabel { phase: "spawn" })
            .observe(spawn.as_secs_f64());
        self.agent_start
            .get_or_create(&PhaseLabel { phase: "initialize" })
            .observe(initialize.as_secs_f64());
    }

    pub(crate) fn interaction_waited(&self, kind: InteractionKind, state: &'static str, took: std::time::Duration) {
        self.interaction_wait
            .get_or_create(&KindStateLabels {
                kind: kind_label(kind),
                state,
            })
            .observe(took.as_secs_f64());
    }

    pub(crate) fn answer_delivered_after(&self, took: std::time::Duration) {
        self.answer_delivery.observe(took.as_secs_f64());
    }

    pub(crate) fn outbox_lag(&self, events: i64) {
        self.outbox_lag.observe(events.max(0) as f64);
    }

    /// A call refused with `reason` (counted once, at the edge that refused it).
    pub fn request_refused(&self, reason: Reason) {
        self.requests_refused
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// A field of a `update_kind` update that the normalizer did not read.
    pub(crate) fn unconsumed_field(&self, update_kind: &'static str, field: &str) {
        let mut name: String = field
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect();
        let mut series = self.unconsumed_series.lock();
        if !series.contains(&(update_kind, name.clone())) {
            if series.len() >= MAX_UNCONSUMED_FIELD_SERIES || name.is_empty() {
                name = "other".into();
            }
            series.insert((update_kind, name.clone()));
        }
        drop(series);
        self.unconsumed_fields
            .get_or_create(&UpdateFieldLabels {
                update_kind,
                field: name,
            })
            .inc();
    }

    /// What the health probe's store ping found.
    pub(crate) fn store_reachable(&self, reachable: bool) {
        self.store_reachable.set(i64::from(reachable));
    }

    pub(crate) fn draining(&self) {
        self.draining.set(1);
    }

    pub(crate) fn taken_over(&self) {
        self.fleet.taken_over();
    }

    /// A call forwarded to its execution's owner, which `answered` it or did not.
    pub fn call_forwarded(&self, answered: bool) {
        self.fleet.call_forwarded(answered);
    }

    /// A session checkpoint's outcome: stored, superseded, refused or failed.
    pub(crate) fn session_checkpoint(&self, outcome: &'static str) {
        self.fleet.session_checkpoint(outcome);
    }

    pub(crate) fn events_pruned(&self, count: u64) {
        self.events_pruned.inc_by(count);
    }

    /// `count` writes of `what` refused by a fence.
    pub(crate) fn fenced_write(&self, what: &'static str, count: u64) {
        self.fenced_writes.get_or_create(&WhatLabel { what }).inc_by(count);
    }

    pub(crate) fn lease_took(&self, warm: bool, took: std::time::Duration) {
        let kind = if warm { "warm" } else { "cold" };
        self.lease_duration
            .get_or_create(&LeaseKindLabel { kind })
            .observe(took.as_secs_f64());
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

impl cursor_runner_store::StoreObserver for Metrics {
    fn observed(&self, operation: &'static str, took: std::time::Duration, ok: bool) {
        let label = OperationLabel { operation };
        self.store_duration.get_or_create(&label).observe(took.as_secs_f64());
        // Operations are known once they run: each gets its error series (at 0) then.
        let errors = self.store_errors.get_or_create(&label);
        if !ok {
            errors.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconsumed_field_series_stay_bounded_and_names_are_reduced() {
        let metrics = Metrics::new();
        for n in 0..(MAX_UNCONSUMED_FIELD_SERIES + 50) {
            metrics.unconsumed_field("tool_call", &format!("field{n}"));
        }
        metrics.unconsumed_field("plan", "bad\u{1b}]0;name\n");
        let scrape = metrics.encode();
        let series = scrape
            .lines()
            .filter(|l| l.starts_with("cursor_runner_unconsumed_fields_total{"))
            .count();
        // The named series, plus one `other` per audited update kind (there from the start,
        // at 0; the two kinds that overflowed count theirs).
        let others = audited_update_kinds().count();
        assert_eq!(series, MAX_UNCONSUMED_FIELD_SERIES + others, "{series} series");
        assert!(scrape.contains("field=\"other\""));
        assert!(!scrape.contains('\u{1b}'));
    }

    #[test]
    fn closed_label_sets_are_exposed_at_zero_before_any_event() {
        let text = Metrics::new().encode();
        for series in [
            "cursor_runner_pool_slots{state=\"idle\",profile=\"configured\"} 0",
            "cursor_runner_pool_slots{state=\"draining\",profile=\"learned\"} 0",
            "cursor_runner_turns_settled_total{state=\"failed\"} 0",
            "cursor_runner_process_exits_total{cause=\"agent\"} 0",
            "cursor_runner_process_starts_total{distribution=\"unpinned\"} 0",
            "cursor_runner_pool_leases_total{kind=\"cold\"} 0",
            "cursor_runner_pool_process_starts_total{outcome=\"failed\"} 0",
            "cursor_runner_fenced_writes_total{what=\"etag\"} 0",
            "cursor_runner_events_appended_total{family=\"runtime_request\"} 0",
            "cursor_runner_interactions_ended_total{kind=\"plan\",state=\"expired\"} 0",
            "cursor_runner_answers_delivered_total{answered_by=\"policy\"} 0",
            "cursor_runner_requests_refused_total{reason=\"POOL_EXHAUSTED\"} 0",
            "cursor_runner_launches_refused_total{reason=\"AGENT_EXITED\"} 0",
            "cursor_runner_pool_failures_total{reason=\"AGENT_EXITED\"} 0",
            "cursor_runner_lease_duration_seconds_count{kind=\"warm\"} 0",
            "cursor_runner_agent_start_seconds_count{phase=\"initialize\"} 0",
            "cursor_runner_turn_duration_seconds_count{state=\"failed\"} 0",
            "cursor_runner_interaction_wait_seconds_count{kind=\"question\",state=\"delivered\"} 0",
            "cursor_runner_unconsumed_fields_total{update_kind=\"tool_call\",field=\"other\"} 0",
            "cursor_runner_store_reachable 0",
            "cursor_runner_draining 0",
        ] {
            assert!(text.contains(series), "{series} missing from\n{text}");
        }
        assert!(!text.contains("state=\"stopped\""), "stopped slots are not counted");
    }

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
