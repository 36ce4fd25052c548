//! The engine's life: start-up (settling what a previous incarnation left, then scanning for
//! replicas to take over), health, drain and shutdown, and the background tasks it runs.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cursor_runner_store::{ExecutionId, ExecutionOwner, ExecutionRecord, Patience, Store};
use cursor_runner_supervisor::agent_callers::{AgentCaller, AgentCallers};
use cursor_runner_supervisor::{Guardian, GuardianConfig};

use tokio::sync::{mpsc, oneshot, watch};

use crate::actor::Command;
use crate::config::EngineConfig;
use crate::heads::{Feed, HeadBus, follow_announcements};
use crate::metrics::Metrics;
use crate::ownership;
use crate::retention::{self};
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_pool::{Pool, PoolStatus, ProfileStatus};
use cursor_runner_supervisor::isolation::AgentIsolation;

use super::data::*;
use super::routing::{WARM_KEYS_PUBLISH_EVERY, publish_warm_keys_every};
use super::takeover::take_over_abandoned_every;

impl Engine {
    /// Registers this process as a replica and settles what its predecessors left live
    /// (a previous incarnation under its name, and rows from before replicas): their
    /// agents are gone, so their turns fail and their pending interactions expire (never
    /// replayed). Other replicas' executions are never touched.
    pub async fn start(store: Arc<dyn Store>, mut config: EngineConfig) -> Result<Arc<Self>, EngineError> {
        let started = std::time::SystemTime::now();
        // Before anything that acts on what a predecessor left (its processes, its live
        // executions, its calls): the name lock proves it is gone.
        let registration = ownership::register(store.as_ref(), &config.replica).await?;
        tracing::info!(
            replica = %registration.name,
            incarnation = %registration.incarnation,
            predecessors = registration.predecessors.len() - 1,
            "registered as a replica"
        );
        // Renewing from now on: settling what the predecessors left may outlast one lease.
        let heartbeat = ownership::heartbeat(Arc::downgrade(&store), config.replica.renew_every());
        // Sweeps what a SIGKILLed previous incarnation left running, before anything launches.
        config.guardian = Some(
            start_guardian(GuardianConfig {
                state_dir: config.state_dir.clone(),
                agent_init: config.agent_init.clone(),
                pid_namespace: config.pid_namespace,
                lease: Some(ownership::agent_deadline(store.lease())),
            })
            .await?,
        );
        let config = Arc::new(config);
        let metrics = Arc::new(Metrics::new());
        let pool = Pool::start(config.pool.clone(), config.launch_settings(), metrics.clone());
        // PostgreSQL may have other replicas writing: deaf until its announcements are heard.
        let feed = if store.backend() == "postgres" {
            Feed::Deaf
        } else {
            Feed::Local
        };
        let engine = Arc::new(Self {
            heads: Arc::new(HeadBus::new(feed)),
            opening_sessions: Default::default(),
            open_streams: Default::default(),
            answerable: Default::default(),
            store,
            incarnation: registration.incarnation.clone(),
            config,
            executions: Arc::new(Mutex::new(HashMap::new())),
            in_flight: Mutex::new(HashMap::new()),
            closing_streams: watch::Sender::new(false),
            draining: watch::Sender::new(false),
            drained: watch::Sender::new(false),
            metrics,
            pool,
            background: Mutex::new(Vec::new()),
            heartbeat: Mutex::new(Some(heartbeat)),
        });
        engine.store.observe_with(engine.metrics.clone());
        for predecessor in &registration.predecessors {
            engine.recover_after_restart(predecessor).await?;
            engine.complete_abandoned_calls(predecessor).await?;
        }
        // Once the predecessors' executions have ended as they will: their homes are judged
        // by how they ended.
        engine.sweep_homes(started).await;
        let takeover = tokio::spawn(take_over_abandoned_every(
            Arc::downgrade(&engine),
            engine.config.replica.renew_every(),
        ));
        let mut background = vec![
            tokio::spawn(sample_outbox_lag(Arc::downgrade(&engine))),
            tokio::spawn(follow_announcements(
                Arc::downgrade(&engine.heads),
                engine.store.clone(),
            )),
            takeover,
            tokio::spawn(publish_warm_keys_every(
                Arc::downgrade(&engine),
                WARM_KEYS_PUBLISH_EVERY,
            )),
        ];
        if let Some(retention) = engine.config.retention {
            background.push(retention::start(
                engine.store.clone(),
                retention,
                engine.metrics.clone(),
            ));
        }
        if let Some(retention) = engine.config.idempotency_retention {
            background.push(retention::start_idempotency(engine.store.clone(), retention));
        }
        *engine.background.lock() = background;
        Ok(engine)
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The replica that owns an execution of the tenant.
    pub async fn execution_owner(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
    ) -> Result<ExecutionOwner, EngineError> {
        self.store
            .execution_owner(tenant_id, execution_id)
            .await?
            .ok_or_else(|| {
                EngineError::not_found(
                    Reason::ExecutionNotFound,
                    format!("no execution `{execution_id}` for this tenant"),
                )
            })
    }

    /// The refusal of a call for a live execution another replica owns, naming that replica
    /// (calls are not routed between replicas yet); `None` when this replica owns it.
    async fn not_here(&self, record: &ExecutionRecord) -> Option<EngineError> {
        if record.state.is_terminal() {
            return None;
        }
        let owner = self.store.execution_owner(&record.tenant_id, &record.id).await.ok()??;
        (owner.name != self.config.replica.name.as_str()).then(|| {
            EngineError::precondition(
                Reason::ExecutionNotReady,
                format!(
                    "execution `{}` is served by replica `{}`, not this one: send its calls there",
                    record.id, owner.name
                ),
            )
            .with("state", record.state.as_str())
            .with("owner_replica", owner.name)
        })
    }

    /// This engine's metrics (served by the runner on its metrics port).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Whether a drain or shutdown has begun; health reports NOT_SERVING then.
    pub fn draining(&self) -> watch::Receiver<bool> {
        self.draining.subscribe()
    }

    /// Whether a drain has closed every execution (the service may exit).
    pub fn drained(&self) -> watch::Receiver<bool> {
        self.drained.subscribe()
    }

    /// The pool, per profile (admin).
    pub fn pool_status(&self) -> PoolStatus {
        self.pool.status()
    }

    /// Ends a profile's quarantine (admin).
    pub fn clear_quarantine(&self, profile_id: &str) -> Result<(), EngineError> {
        if self.pool.clear_quarantine(profile_id) {
            Ok(())
        } else {
            Err(EngineError::not_found(
                Reason::ProfileNotFound,
                format!("no pool profile `{profile_id}`"),
            ))
        }
    }

    /// Starts draining (idempotent; a later call may only bring the deadline forward):
    /// no new executions or turns, idle slots stopped, running turns finish until the
    /// deadline and are then cancelled (interactions settle by their rules), then every
    /// agent is stopped and its execution ends `lost` / `DRAINING` (recoverable on any
    /// replica), and [`Engine::drained`] flips.
    /// Returns the deadline in effect.
    pub fn begin_drain(self: &Arc<Self>, deadline: Option<Duration>) -> Duration {
        let deadline = deadline.unwrap_or(self.config.drain_deadline);
        let first = !self.draining.send_replace(true);
        self.metrics.draining();
        self.pool.drain();
        if first {
            // Other replicas stop placing new executions here (best effort: a replica that
            // is placed on anyway refuses DRAINING, and the placer moves on).
            let store = self.store.clone();
            tokio::spawn(async move {
                if let Err(e) = store.mark_replica_draining().await {
                    tracing::warn!(error = %e, "marking this replica draining failed");
                }
            });
        }
        let until = tokio::time::Instant::now() + deadline;
        let handles: Vec<mpsc::Sender<(Command, tracing::Span)>> =
            self.executions.lock().values().map(|h| h.commands.clone()).collect();
        let engine = self.clone();
        tokio::spawn(async move {
            let mut replies = Vec::new();
            for commands in handles {
                let (reply, rx) = oneshot::channel();
                if commands
                    .send((
                        Command::Drain {
                            deadline: until,
                            force: false,
                            reply,
                        },
                        tracing::Span::current(),
                    ))
                    .await
                    .is_ok()
                {
                    replies.push(rx);
                }
            }
            for rx in replies {
                let _ = rx.await;
            }
            if first {
                engine.pool.stopped(engine.config.stop_grace * 2).await;
                engine.drained.send_replace(true);
                tracing::info!("drained: every execution has ended, recoverable");
            }
        });
        deadline
    }

    /// The store as an execution's actor writes to it: riding out an outage up to
    /// `store_outage_limit` (RPCs use the impatient one and fail fast).
    pub(super) fn execution_store(&self) -> Arc<dyn Store> {
        self.store.with_patience(Patience::For(self.config.store_outage_limit))
    }

    /// The agent behind a connection to the service's API from `peer` (accepted on
    /// `local`), if one of this host's agents holds it: agents never call the API
    /// (`supervisor::agent_callers`). Reads `/proc`: call it off the async workers.
    pub fn agent_behind(&self, peer: std::net::SocketAddr, local: std::net::SocketAddr) -> Option<AgentCaller> {
        let callers = match &self.config.agent_users {
            Some(users) => AgentCallers::Uids(users.uids()),
            None => AgentCallers::LaunchMarker,
        };
        callers.agent_behind(peer, local)
    }

    /// A cheap round trip to the store, for health.
    pub async fn store_reachable(&self) -> bool {
        self.store.get_execution("", &ExecutionId::default()).await.is_ok()
    }

    /// Why the service cannot serve new work right now for want of its store: it does
    /// not answer a cheap round trip within `timeout`.
    pub async fn store_problem(&self, timeout: Duration) -> Option<String> {
        let reachable = tokio::time::timeout(timeout, self.store_reachable())
            .await
            .unwrap_or(false);
        self.metrics.store_reachable(reachable);
        (!reachable).then(|| "the store does not answer".into())
    }

    /// What separates the agents this engine launches from the service, each other and
    /// the host, as in force now.
    pub fn agent_isolation(&self) -> AgentIsolation {
        let guardian = self
            .config
            .guardian
            .as_ref()
            .expect("Engine::start sets the guardian")
            .report();
        AgentIsolation::of_this_process(self.config.agent_users.is_some(), guardian)
    }

    /// Why the service cannot serve new work right now besides its store, if it cannot:
    /// the pinned distribution no longer verifies (quick check), or every known pool
    /// profile is quarantined. Draining is reported apart.
    pub async fn readiness_problem(&self) -> Option<String> {
        if let Some(pinned) = self.config.agent_command.distribution.clone() {
            let verified = tokio::task::spawn_blocking(move || {
                cursor_runner_supervisor::distribution::verify(
                    &pinned.closure_dir,
                    &pinned.pin,
                    cursor_runner_supervisor::distribution::VerifyMode::Quick,
                )
                .map(drop)
                .map_err(|e| e.to_string())
            })
            .await;
            match verified {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Some(format!("the pinned distribution does not verify: {e}")),
                Err(e) => return Some(format!("verifying the distribution failed: {e}")),
            }
        }
        let pool = self.pool.status();
        let quarantined = |p: &ProfileStatus| p.quarantine_remaining.is_some_and(|left| !left.is_zero());
        if !pool.profiles.is_empty() && pool.profiles.iter().all(quarantined) {
            return Some("every pool profile is quarantined".into());
        }
        None
    }

    /// Ends every live execution and stops the pool (service shutdown): no agent outlives
    /// the service. After a drain began, each ends as a drain ends it (`lost` / `DRAINING`,
    /// recoverable) at once; otherwise it is closed.
    pub async fn shutdown(&self) {
        let draining = *self.draining.borrow();
        for task in self.background.lock().drain(..) {
            task.abort();
        }
        self.end_streams();
        self.pool.drain();
        let handles: Vec<mpsc::Sender<(Command, tracing::Span)>> =
            self.executions.lock().values().map(|h| h.commands.clone()).collect();
        // All at once: each close may wait out an agent's stop ladder.
        let mut closes = tokio::task::JoinSet::new();
        for commands in handles {
            let span = tracing::Span::current();
            closes.spawn(async move {
                let (reply, rx) = oneshot::channel();
                let command = match draining {
                    true => Command::Drain {
                        deadline: tokio::time::Instant::now(),
                        force: true,
                        reply,
                    },
                    false => Command::Close { reply },
                };
                if commands.send((command, span)).await.is_ok() {
                    let _ = rx.await;
                }
            });
        }
        closes.join_all().await;
        self.pool.stopped(self.config.stop_grace * 2).await;
        // Renewed until every close has written its settlement.
        if let Some(heartbeat) = self.heartbeat.lock().take() {
            heartbeat.abort();
        }
        // A clean exit: this incarnation owns nothing live any more; its successor under
        // the same name need not wait for anything.
        if let Err(e) = self.store.end_replica().await {
            tracing::warn!(error = %e, "ending this replica's registration failed");
        }
    }

    /// Resolves once this replica's ownership lease has ended (never, for the embedded
    /// store's): from then on the store refuses every owner write and each actor stops
    /// its agent by itself.
    pub async fn lease_lost(&self) {
        ownership::lease_ended(&mut self.store.lease()).await;
    }

    /// Whether this replica's ownership lease has ended.
    pub fn lease_has_ended(&self) -> bool {
        ownership::lease_has_ended(&self.store.lease())
    }

    /// Stops serving after the lease ended, writing nothing (the store would refuse it; the
    /// successor under this name settles what this replica owned): the background tasks
    /// stop, and each actor's agent and every pooled process is stopped before this returns.
    pub async fn stop_fenced(&self) {
        for task in self.background.lock().drain(..).chain(self.heartbeat.lock().take()) {
            task.abort();
        }
        self.end_streams();
        self.pool.drain();
        let handles: Vec<mpsc::Sender<(Command, tracing::Span)>> =
            self.executions.lock().values().map(|h| h.commands.clone()).collect();
        for commands in handles {
            // Each actor stops its agent on the lease's end by itself; its queue closes once
            // it has.
            let _ = tokio::time::timeout(self.config.stop_grace * 2, commands.closed()).await;
        }
        self.pool.stopped(self.config.stop_grace * 2).await;
    }

    /// Hands a command to the actor of the tenant's execution running here, without a
    /// read when it runs here; otherwise (or once its actor has gone) the execution's row
    /// says why not: not found, served by another replica, or not ready.
    pub(super) async fn ask_actor<T>(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        make: impl FnOnce(oneshot::Sender<Result<T, EngineError>>) -> Command,
    ) -> Result<T, EngineError> {
        let handle = self
            .executions
            .lock()
            .get(execution_id)
            .filter(|h| h.tenant_id == tenant_id)
            .map(|h| (h.commands.clone(), h.redactor.clone()));
        let Some((commands, redactor)) = handle else {
            return Err(self.why_not_here(tenant_id, execution_id, false).await);
        };
        let (reply, rx) = oneshot::channel();
        // The caller's span goes along: the actor works on the command inside it.
        if commands.send((make(reply), tracing::Span::current())).await.is_err() {
            return Err(self.why_not_here(tenant_id, execution_id, true).await);
        }
        // The actor's refusals may quote the agent (e.g. a configuration it refused).
        match rx.await {
            Ok(answer) => answer.map_err(|e| e.redacted(&redactor)),
            Err(_) => Err(self.why_not_here(tenant_id, execution_id, true).await),
        }
    }

    /// Why a command for the tenant's execution has no actor here to take it, from its row:
    /// never one here (`actor_ended` false: it may be served by another replica), or its
    /// actor ended while taking the command.
    async fn why_not_here(&self, tenant_id: &str, execution_id: &ExecutionId, actor_ended: bool) -> EngineError {
        let record = match self.get_execution(tenant_id, execution_id).await {
            Ok(record) => record,
            Err(e) => return e,
        };
        if !actor_ended && let Some(elsewhere) = self.not_here(&record).await {
            return elsewhere;
        }
        if self.lease_has_ended() {
            return ownership::fenced_refusal();
        }
        EngineError::precondition(
            Reason::ExecutionNotReady,
            format!("execution `{}` is {}", record.id, record.state),
        )
        .with("state", record.state.as_str())
    }
}

/// Starts the agents' guardian on the state directory, waiting up to [`REPLICA_NAME_WAIT`]
/// for a process still stopping there (a pod restarted in place) to let it go; another live
/// process using the directory is refused (`STATE_DIR_IN_USE`).
async fn start_guardian(config: GuardianConfig) -> Result<Guardian, EngineError> {
    let deadline = tokio::time::Instant::now() + ownership::REPLICA_NAME_WAIT;
    loop {
        match Guardian::start(config.clone()) {
            Ok(guardian) => return Ok(guardian),
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(in_use) => return Err(EngineError::precondition(Reason::StateDirInUse, in_use.to_string())),
        }
    }
}

/// How often the outbox lag (head − acknowledged) of every live execution is sampled.
pub const OUTBOX_LAG_SAMPLE_INTERVAL: Duration = Duration::from_secs(15);

/// Samples head − acknowledged for every live execution, every
/// [`OUTBOX_LAG_SAMPLE_INTERVAL`], until the engine is gone: one read of what this
/// replica owns per sample, however many executions it runs.
async fn sample_outbox_lag(engine: std::sync::Weak<Engine>) {
    let mut every = tokio::time::interval(OUTBOX_LAG_SAMPLE_INTERVAL);
    loop {
        every.tick().await;
        let Some(engine) = engine.upgrade() else { return };
        let Ok(owned) = engine.store.list_live_executions_of(&engine.incarnation).await else {
            continue;
        };
        let executions = engine.executions.lock();
        for record in owned {
            if let Some(handle) = executions.get(&record.id).filter(|h| !h.commands.is_closed()) {
                engine
                    .metrics
                    .outbox_lag(handle.head.borrow().sequence - record.acked_sequence);
            }
        }
    }
}
