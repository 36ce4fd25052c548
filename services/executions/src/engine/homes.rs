//! The start-up sweep of private homes (`docs/scale-out.md` §6). What an earlier process of
//! this replica left under `<state>/homes/` — it may have been killed before its slots
//! ended — is removed, unless a session's only copy may be in it: a home in which an
//! execution ended without its state stored (a `lost` one cut mid-turn, a close whose
//! checkpoint failed) stays for [`HOME_RETENTION`], for a recovery on this replica.

use std::path::Path;
use std::time::{Duration, SystemTime};

use cursor_runner_store::{ExecutionRecord, SessionCheckpoint, StoreResult};

use super::data::*;

/// How long a home that may hold a session's only copy is kept.
pub(crate) const HOME_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// Executions looked at per home (a reused process's home holds several sessions).
const EXECUTIONS_PER_HOME: i64 = 100;

impl Engine {
    /// Removes the homes modified before `before` (this process's own slots are newer) that
    /// no session needs; how many it removed.
    pub(super) async fn sweep_homes(&self, before: SystemTime) -> usize {
        let Ok(entries) = std::fs::read_dir(self.config.state_dir.join("homes")) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
                continue;
            };
            if modified >= before {
                continue;
            }
            match self.home_needed(&path, modified).await {
                Ok(true) => {}
                Ok(false) => match std::fs::remove_dir_all(&path) {
                    Ok(()) => removed += 1,
                    Err(e) => tracing::warn!(home = %path.display(), error = %e, "removing a home failed"),
                },
                Err(e) => tracing::warn!(home = %path.display(), error = %e, "a home is kept: the store did not say"),
            }
        }
        if removed > 0 {
            tracing::info!(
                removed,
                "removed the homes an earlier process left that no session needs"
            );
        }
        removed
    }

    /// Whether an execution that ran in `home` may still need it.
    async fn home_needed(&self, home: &Path, modified: SystemTime) -> StoreResult<bool> {
        let Some(name) = home.file_name().and_then(|n| n.to_str()) else {
            return Ok(false);
        };
        let shown = home.display().to_string();
        let candidates = self
            .store
            .executions_leasing(&format!("homes/{name}\""), EXECUTIONS_PER_HOME)
            .await?;
        let mut unstored = false;
        for execution in candidates {
            let lease = execution.lease.as_ref();
            if lease.is_none_or(|lease| lease.home != shown) {
                continue;
            }
            if !execution.state.is_terminal() {
                return Ok(true);
            }
            let Some(session_id) = &execution.session_id else {
                continue;
            };
            let stored = self.store.session_checkpoint(&execution.tenant_id, session_id).await?;
            unstored |= !state_is_stored(&execution, stored.as_ref());
        }
        let age = SystemTime::now().duration_since(modified).unwrap_or_default();
        Ok(unstored && age < HOME_RETENTION)
    }
}

/// Whether `stored` holds at least the state `ended` left in its home: its own checkpoint
/// from its last generation and turn, or one a later execution of the session took after
/// it ended.
fn state_is_stored(ended: &ExecutionRecord, stored: Option<&SessionCheckpoint>) -> bool {
    stored.is_some_and(|c| match c.execution_id == ended.id {
        true => (c.generation, c.turn_count) >= (ended.generation, ended.turn_count),
        false => c.taken_at_ms >= ended.updated_at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(turn_count: i64) -> ExecutionRecord {
        ExecutionRecord {
            id: "e1".into(),
            generation: cursor_runner_store::Generation::new(2),
            turn_count,
            updated_at_ms: 1_000,
            ..Default::default()
        }
    }

    fn checkpoint(execution_id: &str, generation: i64, turn_count: i64, taken_at_ms: i64) -> SessionCheckpoint {
        SessionCheckpoint {
            execution_id: execution_id.into(),
            generation: generation.into(),
            turn_count,
            taken_at_ms,
            ..Default::default()
        }
    }

    #[test]
    fn a_home_is_needed_only_while_the_store_lacks_the_state_its_execution_left() {
        let cases = [
            (None, false, "nothing stored"),
            (Some(checkpoint("e1", 2, 3, 900)), true, "its own, at its last turn"),
            (
                Some(checkpoint("e1", 2, 2, 900)),
                false,
                "its own, a turn behind (cut mid-turn)",
            ),
            (
                Some(checkpoint("e1", 1, 3, 900)),
                false,
                "its own, an earlier generation",
            ),
            (
                Some(checkpoint("e2", 1, 0, 1_000)),
                true,
                "a later execution's, taken after it ended",
            ),
            (
                Some(checkpoint("e0", 5, 9, 999)),
                false,
                "another execution's, from before it ended",
            ),
        ];
        for (stored, expected, case) in cases {
            assert_eq!(state_is_stored(&ended(3), stored.as_ref()), expected, "{case}");
        }
    }
}
