//! An agent played in-process, for hosts whose hardware is simulated (`fake://` BMCs): demos,
//! scale tests and benchmarks, where nothing boots. Injected into the provisioner as its
//! [`AgentLauncher`] (the default for `fake://` hosts; [`crate::provisioner::HostBoots`] for every
//! other BMC, and for `fake://` ones when a test runs a real agent).
//!
//! # What is simulated, exactly
//!
//! Only the agent: after `step_time` it reports the session's operation as succeeded through the
//! [`AgentRegistry`], as a real agent's heartbeat would, with the BMC's inventory as the hardware
//! an inspection found. The provisioner, its session Secret, the boot media and the BMC calls are
//! the real ones; the agent's HTTP hop, the download and the disk write are not.

use crate::agent_server::{AgentRegistry, SessionSpec};
use crate::provisioner::AgentLauncher;
use capstan_drivers::Bmc;
use capstan_model::agent::{Command, Heartbeat, StepKind, StepPhase, StepReport};
use capstan_model::metal3::HardwareDetails;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

/// Agents that answer after `step_time`.
#[derive(Clone, Copy, Debug)]
pub struct SimulatedAgents {
    step_time: Duration,
}

impl SimulatedAgents {
    pub fn new(step_time: Duration) -> Self {
        Self { step_time }
    }
}

impl AgentLauncher for SimulatedAgents {
    fn booted<'a>(
        &'a self,
        registry: &'a Arc<AgentRegistry>,
        session: &'a SessionSpec,
        bmc: &'a dyn Bmc,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some((operation, kind)) = operation_of(&session.command) else {
                return;
            };
            let hardware = if kind == StepKind::Inspect {
                match bmc.inventory().await {
                    Ok(inventory) => Some(crate::hardware::from_inventory(&inventory)),
                    Err(_) => Some(HardwareDetails::default()),
                }
            } else {
                None
            };
            let registry = registry.clone();
            let token = session.token.clone();
            let step_time = self.step_time;
            tokio::spawn(async move {
                // The simulated boot and step: a stand-in for real time passing, by design.
                tokio::time::sleep(step_time).await;
                registry.heartbeat(&token, succeeded(operation, kind, hardware));
            });
        })
    }
}

/// The operation a session's command runs, if it runs one.
fn operation_of(command: &Command) -> Option<(String, StepKind)> {
    let kind = match command {
        Command::Inspect { .. } => StepKind::Inspect,
        Command::Deploy(_) => StepKind::Deploy,
        Command::Clean(_) => StepKind::Clean,
        Command::Wait => return None,
    };
    Some((command.operation()?.to_owned(), kind))
}

/// The heartbeat of an agent whose operation succeeded.
fn succeeded(operation: String, kind: StepKind, hardware: Option<HardwareDetails>) -> Heartbeat {
    Heartbeat {
        agent_version: "simulated".into(),
        hardware,
        step: Some(StepReport {
            operation,
            kind,
            phase: StepPhase::Succeeded,
            progress: None,
            error: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::agent::{CleanCommand, CleanMode};

    #[test]
    fn operations_are_read_from_the_command() {
        let inspect = Command::Inspect {
            operation: "inspect-1".into(),
        };
        assert_eq!(
            operation_of(&inspect),
            Some(("inspect-1".into(), StepKind::Inspect))
        );
        let clean = Command::Clean(CleanCommand {
            operation: "clean-1".into(),
            mode: CleanMode::Metadata,
            root_device_hints: None,
        });
        assert_eq!(
            operation_of(&clean),
            Some(("clean-1".into(), StepKind::Clean))
        );
        assert_eq!(operation_of(&Command::Wait), None);
        let beat = succeeded("clean-1".into(), StepKind::Clean, None);
        assert_eq!(beat.step.map(|s| s.phase), Some(StepPhase::Succeeded));
    }
}
