//! The host state machine: one handler per [`ProvisioningState`], each returning a typed [`Step`].
//!
//! Handlers look at the host as it is and make one pass: they call provisioner verbs (which are
//! idempotent and answer with progress), fill the new status, and say what comes next. They never
//! wait and never retry in a loop; the controller applies the step (status written once, Events for
//! transitions, the requeue) and the next reconcile continues.
//!
//! What every state shares is handled before the table, in [`next_step`]: deletion, the `detached`
//! annotation, and re-registration when the BMC credentials changed.
//!
//! `table` (tests) runs every transition, failure and retry of the machine against
//! [`crate::fixture::FixtureProvisioner`], one row each, without a server.

use crate::provisioner::{DeployRequest, Progress, Provisioner, ProvisionerError};
use crate::state::{ErrorType, ProvisioningState};
use capstan_model::agent::{ChecksumType, ImageChecksum, ImageFormat};
use capstan_model::metal3::{BareMetalHost, BareMetalHostStatus, HardwareDetails, Image};
use std::sync::Arc;
use std::time::Duration;

/// Annotation that makes the controller leave a host alone entirely.
pub const ANNOTATION_PAUSED: &str = "baremetalhost.metal3.io/paused";
/// Annotation that detaches a host: no BMC actions, deletion without powering off.
pub const ANNOTATION_DETACHED: &str = "baremetalhost.metal3.io/detached";
/// Annotation that requests (any value) or disables (`disabled`) inspection.
pub const ANNOTATION_INSPECT: &str = "inspect.metal3.io";
/// Annotation (and `reboot.metal3.io/<key>` prefix) that requests a power cycle.
pub const ANNOTATION_REBOOT: &str = "reboot.metal3.io";
/// The finalizer the controller keeps on every host it manages.
pub const FINALIZER: &str = "baremetalhost.metal3.io";

/// How often a steady host's power is checked against `spec.online`.
pub const STEADY_RESYNC: Duration = Duration::from_secs(60);

/// What a handler decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Move to another state now.
    Go(ProvisioningState),
    /// Stay; look again after `requeue` (`None`: only when something changes). `note` says what
    /// is under way.
    Stay {
        requeue: Option<Duration>,
        note: Option<String>,
    },
    /// The current operation failed.
    Fail(ErrorType, String),
    /// Deletion is complete: the finalizer can go.
    Released,
}

impl Step {
    fn stay(requeue: Duration) -> Self {
        Step::Stay {
            requeue: Some(requeue),
            note: None,
        }
    }
}

/// Side effects a handler asks for besides the status: Events and annotation removals.
#[derive(Debug, Default)]
pub struct Effects {
    /// Normal Events: (reason, note).
    pub events: Vec<(&'static str, String)>,
    /// Annotations to remove once the status is written.
    pub remove_annotations: Vec<String>,
    /// Inspected hardware to store in a HardwareData object too.
    pub hardware_data: Option<HardwareDetails>,
    /// Delete the host's HardwareData.
    pub delete_hardware_data: bool,
}

/// One pass over one host.
pub struct Pass<'a> {
    pub host: &'a BareMetalHost,
    pub status: BareMetalHostStatus,
    pub provisioner: Option<Arc<dyn Provisioner>>,
    /// Why no provisioner could be made (bad address, missing credentials).
    pub provisioner_error: Option<String>,
    /// The credentials Secret's resourceVersion, when it was read.
    pub credentials_version: Option<String>,
    /// The host's config drive (for provisioning), or why it could not be built.
    pub config_drive: Result<Option<Arc<Vec<u8>>>, String>,
    pub effects: Effects,
}

impl Pass<'_> {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.host
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    fn deleting(&self) -> bool {
        self.host.metadata.deletion_timestamp.is_some()
    }

    fn reboot_annotations(&self) -> Vec<String> {
        self.host
            .metadata
            .annotations
            .as_ref()
            .map(|a| {
                a.keys()
                    .filter(|k| {
                        k.as_str() == ANNOTATION_REBOOT
                            || k.starts_with(&format!("{ANNOTATION_REBOOT}/"))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    fn bmc_address(&self) -> &str {
        self.host
            .spec
            .bmc
            .as_ref()
            .map_or("", |b| b.address.as_str())
    }

    fn provisioner(&self, error_type: ErrorType) -> Result<&Arc<dyn Provisioner>, Step> {
        self.provisioner.as_ref().ok_or_else(|| {
            Step::Fail(
                error_type,
                self.provisioner_error
                    .clone()
                    .unwrap_or_else(|| "no BMC driver for this host".into()),
            )
        })
    }

    fn image(&self) -> Option<&Image> {
        self.host.spec.image.as_ref().filter(|i| !i.url.is_empty())
    }

    fn cleaning(&self) -> bool {
        self.host.spec.automated_cleaning_mode.as_deref() != Some("disabled")
    }
}

fn same_image(a: Option<&Image>, b: Option<&Image>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.url == b.url && a.checksum == b.checksum && a.format == b.format,
        (None, None) => true,
        _ => false,
    }
}

/// Decides the step for `state`.
pub async fn next_step(
    state: ProvisioningState,
    pass: &mut Pass<'_>,
) -> Result<Step, ProvisionerError> {
    use ProvisioningState as S;
    // Deletion overrides every state: deprovision what capstan wrote, power off, release.
    if pass.deleting() {
        let detached = pass.annotation(ANNOTATION_DETACHED).is_some();
        match state {
            S::Deleting | S::PoweringOffBeforeDelete => {}
            S::Deprovisioning if !detached => {}
            S::Provisioned | S::Provisioning if !detached && pass.provisioner.is_some() => {
                return Ok(Step::Go(S::Deprovisioning));
            }
            S::None | S::Unmanaged => return Ok(Step::Go(S::Deleting)),
            // Never reached with its credentials: there is nothing capstan could power off.
            _ if pass.status.good_credentials.is_none() => return Ok(Step::Go(S::Deleting)),
            _ if detached || pass.provisioner.is_none() => return Ok(Step::Go(S::Deleting)),
            _ => return Ok(Step::Go(S::PoweringOffBeforeDelete)),
        }
    } else if pass.annotation(ANNOTATION_DETACHED).is_some() {
        // Detached: capstan keeps the record but touches nothing.
        return Ok(Step::Stay {
            requeue: None,
            note: None,
        });
    }
    if let Some(step) = ensure_registered(state, pass).await? {
        return Ok(step);
    }
    match state {
        S::None => Ok(none(pass)),
        S::Unmanaged => Ok(unmanaged(pass)),
        S::Registering => registering(pass).await,
        S::Inspecting => inspecting(pass).await,
        S::Preparing => Ok(Step::Go(S::Available)),
        S::Available => available(pass).await,
        S::Provisioning => provisioning(pass).await,
        S::Provisioned => provisioned(pass).await,
        S::Deprovisioning => deprovisioning(pass).await,
        S::ExternallyProvisioned => externally_provisioned(pass).await,
        S::PoweringOffBeforeDelete => powering_off_before_delete(pass).await,
        S::Deleting => deleting(pass).await,
    }
}

/// Re-validates access when the credentials changed since they last worked (Metal3's
/// "ensure registered"), in every state that talks to the BMC.
async fn ensure_registered(
    state: ProvisioningState,
    pass: &mut Pass<'_>,
) -> Result<Option<Step>, ProvisionerError> {
    use ProvisioningState as S;
    if matches!(
        state,
        S::None | S::Unmanaged | S::Registering | S::Deleting | S::PoweringOffBeforeDelete
    ) {
        return Ok(None);
    }
    let error_type = if matches!(state, S::Provisioned | S::ExternallyProvisioned) {
        ErrorType::ProvisionedRegistration
    } else {
        ErrorType::Registration
    };
    let provisioner = match pass.provisioner(error_type) {
        Ok(p) => p.clone(),
        Err(step) => return Ok(Some(step)),
    };
    let good = pass
        .status
        .good_credentials
        .as_ref()
        .and_then(|g| g.credentials_version.as_deref());
    if good.is_some() && good == pass.credentials_version.as_deref() {
        return Ok(None);
    }
    match provisioner.validate_management_access().await? {
        Progress::Done(()) => {
            record_good_credentials(pass);
            Ok(None)
        }
        Progress::Busy { requeue, note } => Ok(Some(Step::Stay {
            requeue: Some(requeue),
            note,
        })),
        Progress::Failed(message) => Ok(Some(Step::Fail(error_type, message))),
    }
}

fn record_good_credentials(pass: &mut Pass<'_>) {
    let reference = capstan_model::meta::SecretReference {
        name: pass
            .host
            .spec
            .bmc
            .as_ref()
            .map(|b| b.credentials_name.clone()),
        namespace: pass.host.metadata.namespace.clone(),
    };
    pass.status.good_credentials = Some(capstan_model::metal3::CredentialsStatus {
        credentials: Some(reference),
        credentials_version: pass.credentials_version.clone(),
    });
}

fn none(pass: &Pass<'_>) -> Step {
    if pass.bmc_address().is_empty() {
        Step::Go(ProvisioningState::Unmanaged)
    } else {
        Step::Go(ProvisioningState::Registering)
    }
}

fn unmanaged(pass: &Pass<'_>) -> Step {
    if pass.bmc_address().is_empty() {
        Step::Stay {
            requeue: None,
            note: None,
        }
    } else {
        Step::Go(ProvisioningState::Registering)
    }
}

async fn registering(pass: &mut Pass<'_>) -> Result<Step, ProvisionerError> {
    let provisioner = match pass.provisioner(ErrorType::Registration) {
        Ok(p) => p.clone(),
        Err(step) => return Ok(step),
    };
    match provisioner.validate_management_access().await? {
        Progress::Done(()) => {
            record_good_credentials(pass);
            let inspection_disabled = pass.annotation(ANNOTATION_INSPECT) == Some("disabled")
                || pass.host.spec.inspection_mode.as_deref() == Some("disabled");
            Ok(Step::Go(
                if pass.host.spec.externally_provisioned == Some(true) {
                    ProvisioningState::ExternallyProvisioned
                } else if inspection_disabled {
                    ProvisioningState::Preparing
                } else {
                    ProvisioningState::Inspecting
                },
            ))
        }
        Progress::Busy { requeue, note } => Ok(Step::Stay {
            requeue: Some(requeue),
            note,
        }),
        Progress::Failed(message) => Ok(Step::Fail(ErrorType::Registration, message)),
    }
}

async fn inspecting(pass: &mut Pass<'_>) -> Result<Step, ProvisionerError> {
    let provisioner = match pass.provisioner(ErrorType::Inspection) {
        Ok(p) => p.clone(),
        Err(step) => return Ok(step),
    };
    match provisioner.inspect().await? {
        Progress::Done(hardware) => {
            let summary = format!(
                "{} NIC(s), {} disk(s), {} MiB RAM",
                hardware.nics.len(),
                hardware.storage.len(),
                hardware.ram_mebibytes.unwrap_or(0)
            );
            pass.effects.events.push(("InspectionComplete", summary));
            pass.status.hardware = Some(hardware.clone());
            pass.effects.hardware_data = Some(hardware);
            Ok(Step::Go(ProvisioningState::Preparing))
        }
        Progress::Busy { requeue, note } => Ok(Step::Stay {
            requeue: Some(requeue),
            note,
        }),
        Progress::Failed(message) => Ok(Step::Fail(ErrorType::Inspection, message)),
    }
}

/// Keeps the power where `spec.online` and the reboot annotations want it.
async fn manage_power(
    pass: &mut Pass<'_>,
    error_type: ErrorType,
) -> Result<Step, ProvisionerError> {
    let provisioner = match pass.provisioner(error_type) {
        Ok(p) => p.clone(),
        Err(step) => return Ok(step),
    };
    let is_on = match provisioner.power_state().await? {
        Progress::Done(on) => on,
        Progress::Busy { requeue, note } => {
            return Ok(Step::Stay {
                requeue: Some(requeue),
                note,
            });
        }
        Progress::Failed(message) => return Ok(Step::Fail(ErrorType::PowerManagement, message)),
    };
    pass.status.powered_on = is_on;
    let mut reboots = pass.reboot_annotations();
    if !is_on && reboots.iter().any(|k| k == ANNOTATION_REBOOT) {
        // A one-shot reboot is half done once the host is off: drop the request, power back on.
        pass.effects
            .remove_annotations
            .push(ANNOTATION_REBOOT.to_owned());
        reboots.retain(|k| k != ANNOTATION_REBOOT);
    }
    let want_on = pass.host.spec.online && reboots.is_empty();
    if want_on == is_on {
        return Ok(Step::stay(STEADY_RESYNC));
    }
    match provisioner.set_power(want_on).await? {
        Progress::Done(on) => {
            pass.status.powered_on = on;
            Ok(Step::stay(STEADY_RESYNC))
        }
        Progress::Busy { requeue, note } => {
            pass.effects.events.push((
                if want_on { "PowerOn" } else { "PowerOff" },
                format!("powering {}", if want_on { "on" } else { "off" }),
            ));
            Ok(Step::Stay {
                requeue: Some(requeue),
                note,
            })
        }
        Progress::Failed(message) => Ok(Step::Fail(ErrorType::PowerManagement, message)),
    }
}

async fn available(pass: &mut Pass<'_>) -> Result<Step, ProvisionerError> {
    if let Some(value) = pass.annotation(ANNOTATION_INSPECT)
        && value != "disabled"
    {
        pass.effects
            .remove_annotations
            .push(ANNOTATION_INSPECT.to_owned());
        return Ok(Step::Go(ProvisioningState::Inspecting));
    }
    if pass.host.spec.externally_provisioned == Some(true) {
        return Ok(Step::Go(ProvisioningState::ExternallyProvisioned));
    }
    if pass.image().is_some() {
        return Ok(Step::Go(ProvisioningState::Provisioning));
    }
    manage_power(pass, ErrorType::PowerManagement).await
}

/// The deploy request for `image`, or why the spec cannot be deployed.
fn deploy_request(pass: &Pass<'_>, image: &Image) -> Result<DeployRequest, String> {
    let (checksum, format) = image_checksum_and_format(image)?;
    let config_drive = pass.config_drive.clone()?;
    Ok(DeployRequest {
        image_url: image.url.clone(),
        checksum,
        format,
        root_device_hints: pass.host.spec.root_device_hints.clone(),
        config_drive,
    })
}

/// What `spec.image` asks the agent to fetch and check, or why it cannot be deployed; refused
/// here, before a host is booted for nothing.
fn image_checksum_and_format(image: &Image) -> Result<(ImageChecksum, ImageFormat), String> {
    // Only the schemes the agent downloads from (plain HTTP: a ramdisk has no CA store to check an
    // HTTPS server against, and integrity comes from the checksum), the list render and lint
    // check against too.
    let plain_http = |field: &str, url: &str| {
        capstan_model::agent::check_download_url(url)
            .map_err(|err| format!("{field} {url:?}: {err}"))
    };
    plain_http("spec.image.url", &image.url)?;
    let checksum = image
        .checksum
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .ok_or("spec.image.checksum is empty: give the image's digest (and checksumType)")?;
    let checksum_type = image.checksum_type.as_deref().unwrap_or("auto");
    let checksum = if checksum.contains("://") {
        plain_http("spec.image.checksum", checksum)?;
        // The agent fetches the checksum file; the algorithm, if not named, goes by the digest.
        let algorithm = match checksum_type {
            "" | "auto" => None,
            named => Some(ChecksumType::from_name(named).ok_or_else(|| {
                format!("spec.image.checksumType {named:?} is not md5, sha256, sha512 or auto")
            })?),
        };
        ImageChecksum::Url {
            url: checksum.to_owned(),
            algorithm,
        }
    } else {
        let algorithm = ChecksumType::parse(checksum_type, checksum)
            .filter(|kind| kind.hex_len() == checksum.len())
            .ok_or_else(|| {
                format!(
                    "spec.image.checksumType {checksum_type:?} with a {}-character checksum is not \
                     md5 (32), sha256 (64) or sha512 (128)",
                    checksum.len()
                )
            })?;
        ImageChecksum::Digest {
            value: checksum.to_ascii_lowercase(),
            algorithm,
        }
    };
    let format = match image.format.as_deref() {
        Some("raw") => ImageFormat::Raw,
        Some("qcow2") => ImageFormat::Qcow2,
        None | Some("") => {
            if image.url.ends_with(".qcow2") {
                ImageFormat::Qcow2
            } else {
                ImageFormat::Raw
            }
        }
        Some(other) => {
            return Err(format!(
                "spec.image.format {other:?} is not supported: use raw or qcow2"
            ));
        }
    };
    Ok((checksum, format))
}

async fn provisioning(pass: &mut Pass<'_>) -> Result<Step, ProvisionerError> {
    let Some(image) = pass.image().cloned() else {
        return Ok(Step::Go(ProvisioningState::Deprovisioning));
    };
    let provisioner = match pass.provisioner(ErrorType::Provisioning) {
        Ok(p) => p.clone(),
        Err(step) => return Ok(step),
    };
    if !same_image(pass.status.last_attempted_image.as_ref(), Some(&image)) {
        // A new image (or the first): whatever ran for another one is abandoned.
        if pass.status.last_attempted_image.is_some() {
            match provisioner.release().await? {
                Progress::Done(()) => {}
                Progress::Busy { requeue, note } => {
                    return Ok(Step::Stay {
                        requeue: Some(requeue),
                        note,
                    });
                }
                Progress::Failed(message) => {
                    return Ok(Step::Fail(ErrorType::Provisioning, message));
                }
            }
        }
        pass.status.last_attempted_image = Some(image.clone());
    }
    let request = match deploy_request(pass, &image) {
        Ok(request) => request,
        Err(message) => return Ok(Step::Fail(ErrorType::Provisioning, message)),
    };
    match provisioner
        .provision(&request, pass.host.spec.online)
        .await?
    {
        Progress::Done(()) => {
            pass.status.provisioning.image = Some(image.clone());
            pass.status.provisioning.root_device_hints = pass.host.spec.root_device_hints.clone();
            pass.status.powered_on = pass.host.spec.online;
            pass.effects.events.push((
                "ProvisioningComplete",
                format!("image {} written", image.url),
            ));
            Ok(Step::Go(ProvisioningState::Provisioned))
        }
        Progress::Busy { requeue, note } => Ok(Step::Stay {
            requeue: Some(requeue),
            note,
        }),
        Progress::Failed(message) => {
            pass.status.provisioning_fail_count += 1;
            Ok(Step::Fail(ErrorType::Provisioning, message))
        }
    }
}

async fn provisioned(pass: &mut Pass<'_>) -> Result<Step, ProvisionerError> {
    if !same_image(pass.status.provisioning.image.as_ref(), pass.image()) {
        // The image was taken away or changed: clean up, and provision again if there is one.
        return Ok(Step::Go(ProvisioningState::Deprovisioning));
    }
    manage_power(pass, ErrorType::PowerManagement).await
}

async fn deprovisioning(pass: &mut Pass<'_>) -> Result<Step, ProvisionerError> {
    let provisioner = match pass.provisioner(ErrorType::Provisioning) {
        Ok(p) => p.clone(),
        Err(step) => return Ok(step),
    };
    match provisioner.deprovision(pass.cleaning()).await? {
        Progress::Done(()) => {
            pass.status.provisioning.image = None;
            pass.status.provisioning.root_device_hints = None;
            pass.status.last_attempted_image = None;
            pass.status.powered_on = false;
            Ok(Step::Go(if pass.deleting() {
                ProvisioningState::PoweringOffBeforeDelete
            } else {
                ProvisioningState::Available
            }))
        }
        Progress::Busy { requeue, note } => Ok(Step::Stay {
            requeue: Some(requeue),
            note,
        }),
        Progress::Failed(message) => Ok(Step::Fail(ErrorType::Provisioning, message)),
    }
}

async fn externally_provisioned(pass: &mut Pass<'_>) -> Result<Step, ProvisionerError> {
    manage_power(pass, ErrorType::PowerManagement).await
}

/// After this many failed attempts to power off, deletion goes on without it: a dead BMC must not
/// keep a host object around for ever.
pub const POWER_OFF_ATTEMPTS_BEFORE_DELETE: i64 = 3;

async fn powering_off_before_delete(pass: &mut Pass<'_>) -> Result<Step, ProvisionerError> {
    if pass.host.spec.disable_power_off == Some(true) {
        return Ok(Step::Go(ProvisioningState::Deleting));
    }
    let provisioner = match pass.provisioner(ErrorType::PowerManagement) {
        Ok(p) => p.clone(),
        Err(_) => return Ok(Step::Go(ProvisioningState::Deleting)),
    };
    match provisioner.set_power(false).await? {
        Progress::Done(_) => {
            pass.status.powered_on = false;
            Ok(Step::Go(ProvisioningState::Deleting))
        }
        Progress::Busy { requeue, note } => Ok(Step::Stay {
            requeue: Some(requeue),
            note,
        }),
        Progress::Failed(message) => {
            if pass.status.error_count + 1 >= POWER_OFF_ATTEMPTS_BEFORE_DELETE {
                pass.effects.events.push((
                    "DeletingWithoutPowerOff",
                    format!("giving up powering off after {POWER_OFF_ATTEMPTS_BEFORE_DELETE} attempts: {message}"),
                ));
                Ok(Step::Go(ProvisioningState::Deleting))
            } else {
                Ok(Step::Fail(ErrorType::PowerManagement, message))
            }
        }
    }
}

async fn deleting(pass: &mut Pass<'_>) -> Result<Step, ProvisionerError> {
    if let Some(provisioner) = pass.provisioner.clone() {
        // Best effort: a BMC that cannot eject must not keep the host from going away.
        if let Progress::Failed(message) = provisioner.release().await? {
            tracing::warn!(host = %pass.host.metadata.name.as_deref().unwrap_or(""), error = %message, "releasing the host");
        }
    }
    pass.effects.delete_hardware_data = true;
    Ok(Step::Released)
}

/// The Event reason for moving from `from` to `to`.
pub fn transition_reason(from: ProvisioningState, to: ProvisioningState) -> &'static str {
    use ProvisioningState as S;
    match (from, to) {
        (S::Registering, _) => "Registered",
        (_, S::Registering) => "Registering",
        (_, S::Inspecting) => "InspectionStarted",
        (S::Inspecting, _) => "InspectionFinished",
        (_, S::Available) if from == S::Deprovisioning => "DeprovisioningComplete",
        (_, S::Available) => "Available",
        (_, S::Provisioning) => "ProvisioningStarted",
        (_, S::Provisioned) => "Provisioned",
        (_, S::Deprovisioning) => "DeprovisioningStarted",
        (_, S::ExternallyProvisioned) => "ExternallyProvisioned",
        (_, S::PoweringOffBeforeDelete) => "PoweringOffBeforeDelete",
        (_, S::Deleting) => "Deleting",
        (_, S::Unmanaged) => "Unmanaged",
        _ => "StateChanged",
    }
}

/// The `operationHistory` key of the operation a state runs, if any.
pub fn operation_of(state: ProvisioningState) -> Option<&'static str> {
    match state {
        ProvisioningState::Registering => Some("register"),
        ProvisioningState::Inspecting => Some("inspect"),
        ProvisioningState::Provisioning => Some("provision"),
        ProvisioningState::Deprovisioning => Some("deprovision"),
        _ => None,
    }
}

/// Seconds to wait before retrying after `error_count` consecutive failures: 2 s doubling to
/// 5 minutes.
pub fn error_backoff(error_count: i64) -> Duration {
    let exponent = u32::try_from(error_count.clamp(1, 9)).unwrap_or(1);
    Duration::from_secs(2u64.pow(exponent).min(300))
}

#[cfg(test)]
mod table;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(error_backoff(1), Duration::from_secs(2));
        assert_eq!(error_backoff(2), Duration::from_secs(4));
        assert_eq!(error_backoff(5), Duration::from_secs(32));
        assert_eq!(error_backoff(50), Duration::from_secs(300));
    }

    fn image(url: &str, checksum: &str, checksum_type: Option<&str>) -> Image {
        Image {
            url: url.into(),
            checksum: Some(checksum.into()),
            checksum_type: checksum_type.map(Into::into),
            format: None,
        }
    }

    #[test]
    fn image_checksums_are_digests_or_checksum_file_urls() {
        let sha = "AB".repeat(32);
        let (checksum, format) =
            image_checksum_and_format(&image("http://i/disk.img", &sha, None)).unwrap();
        assert_eq!(
            checksum,
            ImageChecksum::Digest {
                value: "ab".repeat(32),
                algorithm: ChecksumType::Sha256
            }
        );
        assert_eq!(format, ImageFormat::Raw);
        let (checksum, format) = image_checksum_and_format(&image(
            "http://i/disk.qcow2",
            "http://i/SHA256SUMS",
            Some("sha256"),
        ))
        .unwrap();
        assert_eq!(
            checksum,
            ImageChecksum::Url {
                url: "http://i/SHA256SUMS".into(),
                algorithm: Some(ChecksumType::Sha256)
            }
        );
        assert_eq!(format, ImageFormat::Qcow2);
        let (checksum, _) =
            image_checksum_and_format(&image("http://i/d.img", "http://i/SUMS", Some("auto")))
                .unwrap();
        assert!(matches!(
            checksum,
            ImageChecksum::Url {
                algorithm: None,
                ..
            }
        ));
    }

    #[test]
    fn unusable_images_are_refused_before_booting() {
        let sha = "ab".repeat(32);
        for (img, want) in [
            (
                image("http://i/d.img", "", None),
                "spec.image.checksum is empty",
            ),
            (
                image("https://i/d.img", &sha, None),
                "spec.image.url \"https://i/d.img\": https:// is not supported",
            ),
            (
                image("http://i/d.img", "https://i/SUMS", None),
                "spec.image.checksum \"https://i/SUMS\": https:// is not supported",
            ),
            (
                image("http://i/d.img", &sha, Some("sha512")),
                "\"sha512\" with a 64-character checksum",
            ),
            (
                image("http://i/d.img", "http://i/SUMS", Some("crc32")),
                "\"crc32\" is not md5, sha256, sha512 or auto",
            ),
            (
                Image {
                    format: Some("vmdk".into()),
                    ..image("http://i/d.img", &sha, None)
                },
                "\"vmdk\" is not supported",
            ),
        ] {
            let err = image_checksum_and_format(&img).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn images_compare_by_url_checksum_and_format() {
        let a = Image {
            url: "http://x/a.img".into(),
            checksum: Some("abc".into()),
            checksum_type: Some("sha256".into()),
            format: Some("raw".into()),
        };
        let mut b = a.clone();
        assert!(same_image(Some(&a), Some(&b)));
        b.checksum = Some("def".into());
        assert!(!same_image(Some(&a), Some(&b)));
        assert!(!same_image(Some(&a), None));
        assert!(same_image(None, None));
    }
}
