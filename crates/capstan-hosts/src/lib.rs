//! The BareMetalHost controller: Metal3's host lifecycle, driven by capstan itself.
//!
//! - [`state`]: Metal3's names for states, operational status and error types.
//! - [`machine`]: the state machine — one handler per state, each returning a typed step.
//! - [`provisioner`]: coarse, idempotent verbs over a BMC and the agent booted from virtual media.
//! - [`simulated_agent`]: the agent played in-process for `fake://` hosts (demos, scale tests),
//!   injected into the provisioner.
//! - [`agent_server`]: the provisioning HTTP server (boot media, agent callbacks, images) and the
//!   registry of agent sessions it shares with the provisioner.
//! - [`config_drive`]: the `config-2` ISO each host gets from its userData/networkData/metaData.
//! - [`hardware`]: `status.hardware` from a BMC's inventory, for simulated agents.
//! - [`networks`]: the BMC networks a namespace's hosts may use, set by the platform team on the
//!   Namespace.
//! - [`controller`]: the reconciler that runs the machine and writes the outcome.
//! - [`fixture`]: a provisioner with nothing behind it, scripted per verb, for the machine's table
//!   tests.

pub mod agent_server;
pub mod config_drive;
pub mod controller;
pub mod fixture;
pub mod hardware;
pub mod machine;
pub mod networks;
pub mod provisioner;
pub mod simulated_agent;
pub mod state;

pub use agent_server::{AgentRegistry, BootMediaBuilder, ServerSettings};
pub use controller::{HOST_CONTROLLER, HostController, HostSettings};
