//! Why a child's update was dropped instead of projected, and each reason's notice category.

/// Why an update was dropped instead of projected. Each has its notice category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suppression {
    /// A `session/update` for a session that is neither the root nor a known child
    /// (or names none).
    UnknownSession,
    /// A spawn on a session that is neither the root nor a known child, or on none.
    SpawnFromUnknownParent,
    /// A spawn while no turn runs (before it started, after it settled).
    SpawnOutsideTurn,
    /// A lifecycle update without a valid child id, spawning tool call id or state.
    MalformedLifecycle,
    /// A spawn whose child id is its parent's own session id.
    SpawnOfItself,
    /// A spawn of a session already known (the root or a child): the first wins.
    DuplicateSpawn,
    /// A spawn beyond [`MAX_CHILDREN_PER_TURN`].
    ChildLimit,
    /// A state update for a child its session did not spawn.
    UnknownChild,
    /// A later update whose agent id, tool call id or parent differs from the spawn's.
    OriginMismatch,
    /// A state update for a child that has already ended: it ends exactly once.
    AfterEnd,
    /// A `cursor/task` whose `Task` tool call spawned more than one known child.
    AmbiguousTask,
}

impl Suppression {
    /// Every reason, in declaration order.
    pub const ALL: [Self; 11] = [
        Self::UnknownSession,
        Self::SpawnFromUnknownParent,
        Self::SpawnOutsideTurn,
        Self::MalformedLifecycle,
        Self::SpawnOfItself,
        Self::DuplicateSpawn,
        Self::ChildLimit,
        Self::UnknownChild,
        Self::OriginMismatch,
        Self::AfterEnd,
        Self::AmbiguousTask,
    ];

    /// The `provider.notice.recorded` category that reports it.
    pub fn category(self) -> &'static str {
        match self {
            Self::UnknownSession => "unknown_session_update",
            Self::SpawnFromUnknownParent => "child_spawn_unknown_parent",
            Self::SpawnOutsideTurn => "child_spawn_outside_turn",
            Self::MalformedLifecycle => "child_lifecycle_malformed",
            Self::SpawnOfItself => "child_spawn_of_itself",
            Self::DuplicateSpawn => "child_spawn_duplicate",
            Self::ChildLimit => "child_limit_reached",
            Self::UnknownChild => "child_state_unknown_child",
            Self::OriginMismatch => "child_origin_mismatch",
            Self::AfterEnd => "child_state_after_end",
            Self::AmbiguousTask => "cursor_task_ambiguous",
        }
    }

    /// Its position in [`Self::ALL`] (declaration order).
    pub(super) fn index(self) -> usize {
        self as usize
    }
}
