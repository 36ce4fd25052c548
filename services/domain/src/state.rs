//! The state machines. Every legal transition is listed here and nowhere else; the
//! store enforces the durable ones (execution, turn, interaction) with compare-and-set
//! updates on the `state` column; the pool's (slot, profile health) live in memory and
//! `pool` applies them only through [`SlotState::can_become`] / [`ProfileHealth::can_become`].

macro_rules! states {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some(Self::$variant),)+ _ => None }
            }
        }

        /// How the store reads a row's state back.
        impl TryFrom<String> for $name {
            type Error = UnknownState;

            fn try_from(text: String) -> Result<Self, UnknownState> {
                Self::parse(&text).ok_or(UnknownState {
                    machine: stringify!($name),
                    text,
                })
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// A stored state that no state machine here has (a row written by a newer version).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a state of {machine}")]
pub struct UnknownState {
    pub machine: &'static str,
    pub text: String,
}

states!(
    /// An execution: one agent process and one ACP session.
    ExecutionState {
        Starting => "starting",
        Ready => "ready",
        Closing => "closing",
        Closed => "closed",
        Failed => "failed",
        Lost => "lost",
    }
);

/// A new execution's row starts `starting`.
impl Default for ExecutionState {
    fn default() -> Self {
        Self::Starting
    }
}

impl ExecutionState {
    pub fn can_become(self, next: Self) -> bool {
        use ExecutionState::*;
        matches!(
            (self, next),
            (Starting, Ready)
                | (Starting, Failed)
                | (Ready, Closing)
                | (Ready, Lost)
                | (Closing, Closed)
                | (Closing, Lost)
                | (Starting, Lost)
                // RecoverExecution: a new process, a new generation, the same session.
                | (Lost, Starting)
        )
    }

    /// No agent serves it. `lost` is terminal but for one way out: a recovery.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Closed | Self::Failed | Self::Lost)
    }
}

states!(
    /// A turn: one prompt until it settles.
    TurnState {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
        Interrupted => "interrupted",
    }
);

/// A new turn's row starts `running`.
impl Default for TurnState {
    fn default() -> Self {
        Self::Running
    }
}

impl TurnState {
    pub fn can_become(self, next: Self) -> bool {
        self == Self::Running && next != Self::Running
    }
}

states!(
    /// A durable human-facing request.
    InteractionState {
        Pending => "pending",
        Answered => "answered",
        Delivered => "delivered",
        Cancelled => "cancelled",
        Expired => "expired",
    }
);

/// A new interaction's row starts `pending`.
impl Default for InteractionState {
    fn default() -> Self {
        Self::Pending
    }
}

impl InteractionState {
    pub fn can_become(self, next: Self) -> bool {
        use InteractionState::*;
        matches!(
            (self, next),
            (Pending, Answered)
                | (Answered, Delivered)
                | (Pending, Cancelled)
                | (Pending, Expired)
                | (Answered, Expired)
        )
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Delivered | Self::Cancelled | Self::Expired)
    }
}

states!(
    /// How far an interaction's answer got toward the agent: recorded on every interaction
    /// that ends, so no one guesses whether the agent saw it.
    Delivery {
        NotSent => "not_sent",
        PipeWritten => "pipe_written",
        Delivered => "delivered",
        Unknown => "unknown",
    }
);

states!(
    /// A pool slot: one agent process, from launch to reaping.
    SlotState {
        Warming => "warming",
        Idle => "idle",
        Leased => "leased",
        Draining => "draining",
        Stopped => "stopped",
    }
);

impl SlotState {
    pub fn can_become(self, next: Self) -> bool {
        use SlotState::*;
        matches!(
            (self, next),
            // Started and `initialize`d for the pool, or for the execution waiting on it.
            (Warming, Idle)
                | (Warming, Leased)
                | (Warming, Stopped)
                | (Idle, Leased)
                // Recycled: past its TTL, dead, unresponsive, evicted, or the pool drains.
                | (Idle, Draining)
                // Its session ended and the profile allows another on the same process.
                | (Leased, Idle)
                | (Leased, Draining)
                | (Draining, Stopped)
        )
    }
}

states!(
    /// Whether a pool profile may start processes.
    ProfileHealth {
        Healthy => "healthy",
        Quarantined => "quarantined",
    }
);

impl ProfileHealth {
    pub fn can_become(self, next: Self) -> bool {
        // Quarantined past the restart intensity; healthy again once its window passes
        // or an operator clears it.
        self != next
    }
}

/// Where a profile came from, as the bounded label of its slots' metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileOrigin {
    /// A warm profile in the operator's configuration.
    Configured,
    /// Learned from a `CreateExecution` that presented its credential.
    Learned,
}

impl ProfileOrigin {
    pub const ALL: [Self; 2] = [Self::Configured, Self::Learned];

    pub fn of(configured: bool) -> Self {
        if configured { Self::Configured } else { Self::Learned }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Learned => "learned",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legal<T: Copy + std::fmt::Display>(all: &[T], can: impl Fn(T, T) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        for &from in all {
            for &to in all {
                if can(from, to) {
                    out.push(format!("{from}->{to}"));
                }
            }
        }
        out
    }

    #[test]
    fn interaction_transitions_are_exactly_the_documented_ones() {
        assert_eq!(
            legal(InteractionState::ALL, InteractionState::can_become),
            [
                "pending->answered",
                "pending->cancelled",
                "pending->expired",
                "answered->delivered",
                "answered->expired"
            ]
        );
    }

    #[test]
    fn terminal_interaction_states_never_change() {
        for &from in InteractionState::ALL.iter().filter(|s| s.is_terminal()) {
            for &to in InteractionState::ALL {
                assert!(!from.can_become(to), "{from}->{to}");
            }
        }
    }

    #[test]
    fn turns_settle_once_from_running() {
        assert_eq!(
            legal(TurnState::ALL, TurnState::can_become),
            [
                "running->completed",
                "running->failed",
                "running->cancelled",
                "running->interrupted"
            ]
        );
    }

    #[test]
    fn execution_transitions_are_exactly_the_documented_ones() {
        assert_eq!(
            legal(ExecutionState::ALL, ExecutionState::can_become),
            [
                "starting->ready",
                "starting->failed",
                "starting->lost",
                "ready->closing",
                "ready->lost",
                "closing->closed",
                "closing->lost",
                "lost->starting"
            ]
        );
        for &s in [ExecutionState::Closed, ExecutionState::Failed].iter() {
            assert!(ExecutionState::ALL.iter().all(|&n| !s.can_become(n)), "{s}");
        }
    }

    #[test]
    fn slot_transitions_are_exactly_the_documented_ones() {
        assert_eq!(
            legal(SlotState::ALL, SlotState::can_become),
            [
                "warming->idle",
                "warming->leased",
                "warming->stopped",
                "idle->leased",
                "idle->draining",
                "leased->idle",
                "leased->draining",
                "draining->stopped"
            ]
        );
        assert!(SlotState::ALL.iter().all(|&n| !SlotState::Stopped.can_become(n)));
    }

    #[test]
    fn profile_health_goes_back_and_forth() {
        assert_eq!(
            legal(ProfileHealth::ALL, ProfileHealth::can_become),
            ["healthy->quarantined", "quarantined->healthy"]
        );
    }

    #[test]
    fn spellings_round_trip() {
        for &s in InteractionState::ALL {
            assert_eq!(InteractionState::parse(s.as_str()), Some(s));
        }
        for &s in TurnState::ALL {
            assert_eq!(TurnState::parse(s.as_str()), Some(s));
        }
        for &s in ExecutionState::ALL {
            assert_eq!(ExecutionState::parse(s.as_str()), Some(s));
        }
        for &s in SlotState::ALL {
            assert_eq!(SlotState::parse(s.as_str()), Some(s));
        }
    }
}
