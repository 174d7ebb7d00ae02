//! The names Metal3 gives a host's lifecycle: provisioning states, operational status and error
//! types, spelled exactly as `kubectl get bmh` shows them upstream.

use std::fmt;

/// Where a host is in its lifecycle (`status.provisioning.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProvisioningState {
    /// Not looked at yet.
    None,
    /// No BMC address: nothing can be done but wait for one.
    Unmanaged,
    /// Checking that the BMC answers to the credentials.
    Registering,
    /// Booting the agent to find out what the host is made of.
    Inspecting,
    /// Applying settings (firmware, RAID) before the host is offered; nothing to apply today.
    Preparing,
    /// Ready to be given an image.
    Available,
    /// Writing the image.
    Provisioning,
    /// Running its image.
    Provisioned,
    /// Cleaning up after its image was taken away.
    Deprovisioning,
    /// Running an image capstan did not write; only power is managed.
    ExternallyProvisioned,
    /// Being deleted: powering off first.
    PoweringOffBeforeDelete,
    /// Being deleted: releasing what capstan holds for it.
    Deleting,
}

impl ProvisioningState {
    /// Every state, for tables and tests.
    pub const ALL: [Self; 12] = [
        Self::None,
        Self::Unmanaged,
        Self::Registering,
        Self::Inspecting,
        Self::Preparing,
        Self::Available,
        Self::Provisioning,
        Self::Provisioned,
        Self::Deprovisioning,
        Self::ExternallyProvisioned,
        Self::PoweringOffBeforeDelete,
        Self::Deleting,
    ];

    /// The Metal3 spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "",
            Self::Unmanaged => "unmanaged",
            Self::Registering => "registering",
            Self::Inspecting => "inspecting",
            Self::Preparing => "preparing",
            Self::Available => "available",
            Self::Provisioning => "provisioning",
            Self::Provisioned => "provisioned",
            Self::Deprovisioning => "deprovisioning",
            Self::ExternallyProvisioned => "externally provisioned",
            Self::PoweringOffBeforeDelete => "powering off before delete",
            Self::Deleting => "deleting",
        }
    }

    /// Reads a state as Metal3 writes it. `ready` is the name older Metal3 releases gave
    /// `available`; `match profile` and `detached` are read as the states that replaced them.
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "" => Self::None,
            "unmanaged" => Self::Unmanaged,
            "registering" => Self::Registering,
            "inspecting" => Self::Inspecting,
            "preparing" | "match profile" => Self::Preparing,
            "available" | "ready" => Self::Available,
            "provisioning" => Self::Provisioning,
            "provisioned" => Self::Provisioned,
            "deprovisioning" => Self::Deprovisioning,
            "externally provisioned" => Self::ExternallyProvisioned,
            "powering off before delete" => Self::PoweringOffBeforeDelete,
            "deleting" => Self::Deleting,
            _ => return None,
        })
    }
}

impl fmt::Display for ProvisioningState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("(none)"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// `status.operationalStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationalStatus {
    /// All is well.
    Ok,
    /// Known but not manageable yet (no BMC address or credentials).
    Discovered,
    /// The last operation failed; `errorType` and `errorMessage` say how.
    Error,
    /// The `detached` annotation is set: capstan leaves the host alone.
    Detached,
}

impl OperationalStatus {
    /// The Metal3 spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "OK",
            Self::Discovered => "discovered",
            Self::Error => "error",
            Self::Detached => "detached",
        }
    }
}

/// `status.errorType`: which kind of operation failed, among the values upstream's CRD admits (it
/// has no "detach error", so none is reported).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// The BMC could not be reached or refused the credentials.
    Registration,
    /// The BMC of a provisioned host stopped answering.
    ProvisionedRegistration,
    /// Inspection failed.
    Inspection,
    /// Preparation failed.
    Preparation,
    /// Writing the image failed.
    Provisioning,
    /// A power change failed.
    PowerManagement,
}

impl ErrorType {
    /// The Metal3 spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Registration => "registration error",
            Self::ProvisionedRegistration => "provisioned registration error",
            Self::Inspection => "inspection error",
            Self::Preparation => "preparation error",
            Self::Provisioning => "provisioning error",
            Self::PowerManagement => "power management error",
        }
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_from_its_spelling() {
        for state in ProvisioningState::ALL {
            assert_eq!(ProvisioningState::parse(state.as_str()), Some(state));
        }
        assert_eq!(
            ProvisioningState::parse("ready"),
            Some(ProvisioningState::Available)
        );
        assert_eq!(ProvisioningState::parse("flying"), None);
    }
}
