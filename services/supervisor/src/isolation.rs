//! What separates agents from the service, from each other and from the host, as one
//! value. `GetCapabilities` (the `Agent isolation` row), the `AgentIsolation` health
//! entry and `doctor` all say it from here, in the same words, so a client, a probe and
//! an operator read one story — a service that cannot separate agents says so instead
//! of only logging it.

use crate::GuardianReport;

/// One layer of agent isolation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLayer {
    /// Each agent process under an unprivileged uid of its own (`agent_users`).
    SeparateUids,
    /// Each agent under `agent-init` as PID 1 of its own PID namespace.
    PidNamespace,
    /// A fresh `/proc` of that namespace in the agent's own mount namespace.
    PrivateProc,
    /// The service is non-dumpable (`PR_SET_DUMPABLE` 0).
    NonDumpable,
}

impl IsolationLayer {
    pub const ALL: [Self; 4] = [
        Self::SeparateUids,
        Self::PidNamespace,
        Self::PrivateProc,
        Self::NonDumpable,
    ];

    /// Its name, as every surface spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::SeparateUids => "separate uids",
            Self::PidNamespace => "PID namespace",
            Self::PrivateProc => "private /proc",
            Self::NonDumpable => "non-dumpable service",
        }
    }

    /// What agents (or the host) are exposed to while it is missing.
    pub fn missing_means(self) -> &'static str {
        match self {
            Self::SeparateUids => {
                "agents run as the service's own uid: they can read and alter its files, its database and each other"
            }
            Self::PidNamespace => {
                "an agent's descendants are bounded by the fallbacks only: parent-death signal, process group, census, launch ledger"
            }
            Self::PrivateProc => "agents see the host's processes and their command lines in /proc",
            Self::NonDumpable => "a process of the service's uid without CAP_SYS_PTRACE can read its memory",
        }
    }
}

/// Which layers are in force for the agents this service launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentIsolation {
    pub separate_uids: bool,
    pub pid_namespace: bool,
    pub private_proc: bool,
    pub non_dumpable: bool,
}

impl AgentIsolation {
    /// This process's isolation: whether agents get uids of their own (the caller knows),
    /// what the guardian could set up, and this process's own dumpable flag as the kernel
    /// has it now — what is in force, not what was meant.
    pub fn of_this_process(separate_uids: bool, guardian: GuardianReport) -> Self {
        Self {
            separate_uids,
            pid_namespace: guardian.pid_namespace,
            private_proc: guardian.private_proc,
            // An error cannot happen for PR_GET_DUMPABLE; claiming the layer on one would lie.
            non_dumpable: nix::sys::prctl::get_dumpable().is_ok_and(|dumpable| !dumpable),
        }
    }

    pub fn has(&self, layer: IsolationLayer) -> bool {
        match layer {
            IsolationLayer::SeparateUids => self.separate_uids,
            IsolationLayer::PidNamespace => self.pid_namespace,
            IsolationLayer::PrivateProc => self.private_proc,
            IsolationLayer::NonDumpable => self.non_dumpable,
        }
    }

    /// The layers not in force, in [`IsolationLayer::ALL`]'s order.
    pub fn missing(&self) -> Vec<IsolationLayer> {
        IsolationLayer::ALL
            .into_iter()
            .filter(|layer| !self.has(*layer))
            .collect()
    }

    pub fn is_complete(&self) -> bool {
        self.missing().is_empty()
    }

    /// One line: every layer in force, or each missing one named with what it exposes.
    pub fn reason(&self) -> String {
        let missing = self.missing();
        if missing.is_empty() {
            return "each agent under an unprivileged uid of its own, in its own PID namespace with a private /proc; \
                    the service is non-dumpable"
                .to_owned();
        }
        let named: Vec<String> = missing
            .iter()
            .map(|layer| format!("{} ({})", layer.name(), layer.missing_means()))
            .collect();
        format!("missing: {}", named.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMPLETE: AgentIsolation = AgentIsolation {
        separate_uids: true,
        pid_namespace: true,
        private_proc: true,
        non_dumpable: true,
    };

    #[test]
    fn a_complete_isolation_misses_nothing_and_says_so() {
        assert!(COMPLETE.is_complete());
        assert!(!COMPLETE.reason().contains("missing"), "{}", COMPLETE.reason());
    }

    #[test]
    fn the_reason_names_every_missing_layer_and_no_other() {
        let partial = AgentIsolation {
            pid_namespace: false,
            non_dumpable: false,
            ..COMPLETE
        };
        assert_eq!(
            partial.missing(),
            [IsolationLayer::PidNamespace, IsolationLayer::NonDumpable]
        );
        let reason = partial.reason();
        for layer in IsolationLayer::ALL {
            assert_eq!(
                reason.contains(layer.name()),
                !partial.has(layer),
                "{}: {reason}",
                layer.name()
            );
        }
    }
}
