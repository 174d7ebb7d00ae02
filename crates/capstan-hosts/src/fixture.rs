//! A provisioner with nothing behind it, for tests of the host state machine (the role of the
//! baremetal-operator's `pkg/provisioner/fixture`): each verb answers what the test scripted, the
//! host's power is a flag the power verbs read and set, and every call is recorded so a test can
//! say which BMC actions a state took.
//!
//! Nothing here is used by the product: [`crate::provisioner::VirtualMediaProvisioner`] is the
//! provisioner of every real and simulated host (`fake://` BMCs and the simulated agent run its
//! code too); this one leaves the BMC and the agent out entirely, so a table of transitions can run
//! without a server, a BMC or time passing.

use crate::provisioner::{DeployRequest, Progress, Provisioner, ProvisionerError};
use capstan_model::metal3::HardwareDetails;
use futures::future::BoxFuture;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// One verb the state machine called, with what it asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    ValidateManagementAccess,
    Inspect,
    Provision { image_url: String, power_on: bool },
    Deprovision { clean: bool },
    SetPower(bool),
    PowerState,
    Release,
}

/// What a verb answers: progress, or the API server failing the provisioner.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer<T> {
    Progress(Progress<T>),
    /// The verb could not tell where its operation stands (its session Secret is unreadable).
    ApiFailure,
}

impl<T> From<Progress<T>> for Answer<T> {
    fn from(progress: Progress<T>) -> Self {
        Answer::Progress(progress)
    }
}

/// The answers of every verb (all `Done` unless a test scripts otherwise).
#[derive(Clone, Debug)]
pub struct Script {
    pub validate_management_access: Answer<()>,
    pub inspect: Answer<HardwareDetails>,
    pub provision: Answer<()>,
    pub deprovision: Answer<()>,
    /// `Done` sets the power flag to what was asked.
    pub set_power: Answer<()>,
    /// `None`: `Done` with the power flag.
    pub power_state: Option<Answer<bool>>,
    pub release: Answer<()>,
}

impl Default for Script {
    fn default() -> Self {
        let done = || Answer::Progress(Progress::Done(()));
        Self {
            validate_management_access: done(),
            inspect: Answer::Progress(Progress::Done(HardwareDetails::default())),
            provision: done(),
            deprovision: done(),
            set_power: done(),
            power_state: None,
            release: done(),
        }
    }
}

#[derive(Debug)]
struct State {
    script: Script,
    powered_on: bool,
    calls: Vec<Call>,
}

/// The fixture: a [`Script`], a power flag and the calls made.
#[derive(Debug)]
pub struct FixtureProvisioner {
    state: Mutex<State>,
}

impl FixtureProvisioner {
    pub fn new(script: Script, powered_on: bool) -> Self {
        Self {
            state: Mutex::new(State {
                script,
                powered_on,
                calls: Vec::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock has failed already; its state is still
        // the best account of what happened.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calls made so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// Whether the host is on.
    pub fn powered_on(&self) -> bool {
        self.state().powered_on
    }

    fn answer<T: Clone>(
        &self,
        call: Call,
        pick: impl FnOnce(&mut State) -> Answer<T>,
    ) -> Result<Progress<T>, ProvisionerError> {
        let mut state = self.state();
        state.calls.push(call);
        match pick(&mut state) {
            Answer::Progress(progress) => Ok(progress),
            Answer::ApiFailure => Err(ProvisionerError::MalformedSession {
                namespace: "fixture".into(),
                name: "fixture-agent-session".into(),
                reason: "scripted API failure".into(),
            }),
        }
    }
}

impl Provisioner for FixtureProvisioner {
    fn validate_management_access(&self) -> BoxFuture<'_, Result<Progress, ProvisionerError>> {
        let answer = self.answer(Call::ValidateManagementAccess, |s| {
            s.script.validate_management_access.clone()
        });
        Box::pin(async move { answer })
    }

    fn inspect(&self) -> BoxFuture<'_, Result<Progress<HardwareDetails>, ProvisionerError>> {
        let answer = self.answer(Call::Inspect, |s| s.script.inspect.clone());
        Box::pin(async move { answer })
    }

    fn provision<'a>(
        &'a self,
        request: &'a DeployRequest,
        power_on: bool,
    ) -> BoxFuture<'a, Result<Progress, ProvisionerError>> {
        let call = Call::Provision {
            image_url: request.image_url.clone(),
            power_on,
        };
        let answer = self.answer(call, |s| {
            let answer = s.script.provision.clone();
            if answer == Answer::Progress(Progress::Done(())) {
                s.powered_on = power_on;
            }
            answer
        });
        Box::pin(async move { answer })
    }

    fn deprovision(&self, clean: bool) -> BoxFuture<'_, Result<Progress, ProvisionerError>> {
        let answer = self.answer(Call::Deprovision { clean }, |s| {
            let answer = s.script.deprovision.clone();
            if answer == Answer::Progress(Progress::Done(())) {
                s.powered_on = false;
            }
            answer
        });
        Box::pin(async move { answer })
    }

    fn set_power(&self, on: bool) -> BoxFuture<'_, Result<Progress<bool>, ProvisionerError>> {
        let answer = self.answer(Call::SetPower(on), |s| match s.script.set_power.clone() {
            Answer::Progress(Progress::Done(())) => {
                s.powered_on = on;
                Answer::Progress(Progress::Done(on))
            }
            Answer::Progress(Progress::Busy { requeue, note }) => {
                Answer::Progress(Progress::Busy { requeue, note })
            }
            Answer::Progress(Progress::Failed(message)) => {
                Answer::Progress(Progress::Failed(message))
            }
            Answer::ApiFailure => Answer::ApiFailure,
        });
        Box::pin(async move { answer })
    }

    fn power_state(&self) -> BoxFuture<'_, Result<Progress<bool>, ProvisionerError>> {
        let answer = self.answer(Call::PowerState, |s| {
            s.script
                .power_state
                .clone()
                .unwrap_or(Answer::Progress(Progress::Done(s.powered_on)))
        });
        Box::pin(async move { answer })
    }

    fn release(&self) -> BoxFuture<'_, Result<Progress, ProvisionerError>> {
        let answer = self.answer(Call::Release, |s| s.script.release.clone());
        Box::pin(async move { answer })
    }
}
