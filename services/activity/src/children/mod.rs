//! Child agents — Cursor's subagents (`subagent_spawned` / `subagent_state_update`,
//! sent when the client opts in with `clientCapabilities._meta.subagents`) and ACP
//! 1.20's `subagent_update` — as `delegation.*` records, and their transcripts,
//! attributed to them and never flattened into the parent's.
//!
//! | native | canonical |
//! |---|---|
//! | `subagent_spawned` on the parent's session | `delegation.started`, `running`, `action: spawn` (`resume` for an id `<agentId>.<n>`, linked to the turn's first incarnation of that agent) |
//! | `subagent_state_update` `completed` / `failed` | `delegation.completed` `completed` / `failed` |
//! | `subagent_state_update` `cancelled` | `delegation.completed` `interrupted`, with an explanation |
//! | `subagent_state_update` `disconnected` | `delegation.completed` `failed`, with an explanation — never a success |
//! | ACP `subagent_update`, first for a child / later | `delegation.started` / `delegation.updated` (`running`; `idle` and `requires_action` are `waiting`) |
//! | `cursor/task` naming a known child's `Task` tool call | `delegation.updated` (role, model, duration, prompt size): the child still completes exactly once |
//! | `cursor/task` for no known child | `delegation.completed`, `evidence: cursor_task_metadata` (the opt-out path) |
//! | a child's text, reasoning, plan and tool updates | the root's projections, with `childId`, the child's own item ids and its own tool-call namespace |
//! | a child's other updates | an `unprojected_child_update` notice, attributed |
//! | a child still open when the turn settles | `delegation.completed` `interrupted` (`closed` when it was idle), `evidence: turn_settled` |
//!
//! **Authority.** The turn's root session is the only authority. A child is known only
//! after a valid spawn on its parent's session — the root or an already known child
//! (so grandchildren keep the tree) — while the turn runs. Everything else is
//! suppressed: counted per [`Suppression`] and reported by a warning notice (once per
//! kind and session, at most [`MAX_SUPPRESSION_NOTICES`] per normalizer; `finish()`
//! totals the rest). The origin fixed at the spawn — the parent, `_meta.cursor.agentId`
//! and the spawning tool call id — is checked on every later lifecycle update, and the
//! agent id on every child update that carries one.
//!
//! **What it cannot see.** `session/load` replays spawns and terminal states but not
//! child transcripts; Cursor reports terminal states only, so a Cursor child is
//! `running` from its spawn until it ends; no duration is measured here (no clock),
//! only the one `cursor/task` reports.

mod delegation;
mod registry;
mod summary;
mod suppression;

pub use registry::ChildRef;
pub(crate) use registry::{Children, Route};
pub use suppression::Suppression;

#[cfg(test)]
mod tests;
