//! Table tests of the host state machine against [`crate::fixture::FixtureProvisioner`]: every
//! state's transitions, failures and retries, one row each, with the BMC calls each makes. No
//! server, no BMC, no time passing: a row is one pass (`next_step`, then `settle`, what the
//! controller does with the step).

use super::*;
use crate::controller::{CONDITION_PROGRESS, settle};
use crate::fixture::{Answer, Call, FixtureProvisioner, Script};
use crate::provisioner::Progress;
use crate::state::ErrorType as E;
use crate::state::ProvisioningState as S;
use capstan_runtime::Action;
use serde_json::{Value, json};

const SHA256: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const IMAGE_URL: &str = "http://127.0.0.1:8080/images/node.qcow2";
const NOW: &str = "2026-12-03T12:00:00Z";

/// One pass over one host.
struct Row {
    name: &'static str,
    state: S,
    /// Merged over the base host (`spec`, `metadata`, `status`).
    host: Value,
    script: Script,
    powered_on: bool,
    /// `Some`: no provisioner could be made, for this reason.
    no_provisioner: Option<&'static str>,
    /// The credentials Secret's resourceVersion (the base host's last good one is "1").
    credentials_version: &'static str,
    config_drive: Result<Option<Arc<Vec<u8>>>, String>,
    expect: Step,
    calls: Vec<Call>,
}

impl Row {
    fn new(name: &'static str, state: S, expect: Step) -> Self {
        Self {
            name,
            state,
            host: json!({}),
            script: Script::default(),
            powered_on: false,
            no_provisioner: None,
            credentials_version: "1",
            config_drive: Ok(None),
            expect,
            calls: Vec::new(),
        }
    }
    fn host(mut self, host: Value) -> Self {
        self.host = host;
        self
    }
    /// Scripts one verb's answer.
    fn with(mut self, edit: impl FnOnce(&mut Script)) -> Self {
        edit(&mut self.script);
        self
    }
    fn on(mut self) -> Self {
        self.powered_on = true;
        self
    }
    fn calls(mut self, calls: Vec<Call>) -> Self {
        self.calls = calls;
        self
    }
}

fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                if value.is_null() {
                    base.remove(key);
                } else {
                    merge(base.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (base, over) => *base = over.clone(),
    }
}

fn host_for(row: &Row) -> BareMetalHost {
    let mut host = json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": "host-0", "namespace": "metal3", "uid": "u-0"},
        "spec": {
            "online": true,
            "bmc": {"address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1", "credentialsName": "host-0-bmc"},
        },
        "status": {
            "provisioning": {"state": row.state.as_str()},
            "goodCredentials": {"credentials": {"name": "host-0-bmc", "namespace": "metal3"}, "credentialsVersion": "1"},
        },
    });
    merge(&mut host, &row.host);
    match serde_json::from_value(host) {
        Ok(host) => host,
        Err(err) => panic!("{}: the row's host does not decode: {err}", row.name),
    }
}

fn image() -> Value {
    json!({"url": IMAGE_URL, "checksum": SHA256, "checksumType": "sha256"})
}

fn busy<T>(note: &str) -> Answer<T> {
    Answer::Progress(Progress::Busy {
        requeue: Duration::from_secs(2),
        note: Some(note.into()),
    })
}

fn stay_busy(note: &str) -> Step {
    Step::Stay {
        requeue: Some(Duration::from_secs(2)),
        note: Some(note.into()),
    }
}

fn failed<T>(message: &str) -> Answer<T> {
    Answer::Progress(Progress::Failed(message.into()))
}

struct Ran {
    step: Result<Step, String>,
    status: BareMetalHostStatus,
    effects: Effects,
    calls: Vec<Call>,
    powered_on: bool,
}

async fn run(row: &Row) -> Ran {
    let host = host_for(row);
    let fixture = Arc::new(FixtureProvisioner::new(row.script.clone(), row.powered_on));
    let provisioner: Option<Arc<dyn Provisioner>> = match row.no_provisioner {
        Some(_) => None,
        None => Some(fixture.clone()),
    };
    let mut pass = Pass {
        host: &host,
        status: host.status.clone().unwrap_or_default(),
        provisioner,
        provisioner_error: row.no_provisioner.map(str::to_owned),
        credentials_version: Some(row.credentials_version.to_owned()),
        config_drive: row.config_drive.clone(),
        effects: Effects::default(),
    };
    let step = next_step(row.state, &mut pass)
        .await
        .map_err(|e| e.to_string());
    Ran {
        step,
        status: pass.status,
        effects: pass.effects,
        calls: fixture.calls(),
        powered_on: fixture.powered_on(),
    }
}

fn rows() -> Vec<Row> {
    let power = |on| vec![Call::PowerState, Call::SetPower(on)];
    vec![
        // Registration.
        Row::new("a new host with a BMC registers", S::None, Step::Go(S::Registering)),
        Row::new("a new host without a BMC is unmanaged", S::None, Step::Go(S::Unmanaged))
            .host(json!({"spec": {"bmc": null}})),
        Row::new(
            "an unmanaged host stays until it has a BMC",
            S::Unmanaged,
            Step::Stay { requeue: None, note: None },
        )
        .host(json!({"spec": {"bmc": null}})),
        Row::new("an unmanaged host given a BMC registers", S::Unmanaged, Step::Go(S::Registering)),
        Row::new("registration that reaches the BMC inspects", S::Registering, Step::Go(S::Inspecting))
            .calls(vec![Call::ValidateManagementAccess]),
        Row::new(
            "registration with inspection disabled prepares",
            S::Registering,
            Step::Go(S::Preparing),
        )
        .host(json!({"metadata": {"annotations": {"inspect.metal3.io": "disabled"}}}))
        .calls(vec![Call::ValidateManagementAccess]),
        Row::new(
            "registration with inspectionMode disabled prepares",
            S::Registering,
            Step::Go(S::Preparing),
        )
        .host(json!({"spec": {"inspectionMode": "disabled"}}))
        .calls(vec![Call::ValidateManagementAccess]),
        Row::new(
            "registration of an externally provisioned host adopts it",
            S::Registering,
            Step::Go(S::ExternallyProvisioned),
        )
        .host(json!({"spec": {"externallyProvisioned": true}}))
        .calls(vec![Call::ValidateManagementAccess]),
        Row::new(
            "a BMC that refuses fails registration",
            S::Registering,
            Step::Fail(E::Registration, "401 Unauthorized".into()),
        )
        .with(|s| s.validate_management_access = failed("401 Unauthorized"))
        .calls(vec![Call::ValidateManagementAccess]),
        Row {
            no_provisioner: Some("spec.bmc.address: unknown scheme \"idrac9\""),
            ..Row::new(
                "a host with no driver for its BMC fails registration",
                S::Registering,
                Step::Fail(E::Registration, "spec.bmc.address: unknown scheme \"idrac9\"".into()),
            )
        },
        Row::new("a BMC still answering keeps registration waiting", S::Registering, stay_busy("connecting"))
            .with(|s| s.validate_management_access = busy("connecting"))
            .calls(vec![Call::ValidateManagementAccess]),
        // Credentials changed since they last worked: validated again in every BMC state.
        Row {
            credentials_version: "2",
            ..Row::new(
                "changed credentials that fail stop an available host",
                S::Available,
                Step::Fail(E::Registration, "401 Unauthorized".into()),
            )
            .with(|s| s.validate_management_access = failed("401 Unauthorized"))
            .calls(vec![Call::ValidateManagementAccess])
        },
        Row {
            credentials_version: "2",
            ..Row::new(
                "changed credentials that fail on a provisioned host",
                S::Provisioned,
                Step::Fail(E::ProvisionedRegistration, "401 Unauthorized".into()),
            )
            .host(json!({"spec": {"image": image()}, "status": {"provisioning": {"image": image()}}}))
            .with(|s| s.validate_management_access = failed("401 Unauthorized"))
            .calls(vec![Call::ValidateManagementAccess])
        },
        Row {
            credentials_version: "2",
            ..Row::new(
                "changed credentials that work are recorded and the state goes on",
                S::Available,
                Step::stay(STEADY_RESYNC),
            )
            .on()
            .calls(vec![Call::ValidateManagementAccess, Call::PowerState])
        },
        // Inspection and preparation.
        Row::new("inspection that finishes prepares", S::Inspecting, Step::Go(S::Preparing))
            .calls(vec![Call::Inspect]),
        Row::new("inspection under way stays", S::Inspecting, stay_busy("inspect: running"))
            .with(|s| s.inspect = busy("inspect: running"))
            .calls(vec![Call::Inspect]),
        Row::new(
            "inspection that fails",
            S::Inspecting,
            Step::Fail(E::Inspection, "the agent did not call back".into()),
        )
        .with(|s| s.inspect = failed("the agent did not call back"))
        .calls(vec![Call::Inspect]),
        Row::new("preparation makes the host available", S::Preparing, Step::Go(S::Available)),
        // Available.
        Row::new("an inspect annotation inspects again", S::Available, Step::Go(S::Inspecting))
            .host(json!({"metadata": {"annotations": {"inspect.metal3.io": ""}}})),
        Row::new("an image provisions", S::Available, Step::Go(S::Provisioning))
            .host(json!({"spec": {"image": image()}})),
        Row::new(
            "an available host marked externally provisioned is adopted",
            S::Available,
            Step::Go(S::ExternallyProvisioned),
        )
        .host(json!({"spec": {"externallyProvisioned": true}})),
        Row::new("an online host that is off is powered on", S::Available, Step::stay(STEADY_RESYNC))
            .calls(power(true)),
        Row::new("an offline host that is on is powered off", S::Available, Step::stay(STEADY_RESYNC))
            .host(json!({"spec": {"online": false}}))
            .on()
            .calls(power(false)),
        Row::new("a host already as wanted is only looked at", S::Available, Step::stay(STEADY_RESYNC))
            .on()
            .calls(vec![Call::PowerState]),
        Row::new("a reboot annotation powers the host off", S::Available, Step::stay(STEADY_RESYNC))
            .host(json!({"metadata": {"annotations": {"reboot.metal3.io": ""}}}))
            .on()
            .calls(power(false)),
        Row::new(
            "a one-shot reboot of a host that is off powers it back on",
            S::Available,
            Step::stay(STEADY_RESYNC),
        )
        .host(json!({"metadata": {"annotations": {"reboot.metal3.io": ""}}}))
        .calls(power(true)),
        Row::new(
            "a held reboot (reboot.metal3.io/<key>) keeps the host off",
            S::Available,
            Step::stay(STEADY_RESYNC),
        )
        .host(json!({"metadata": {"annotations": {"reboot.metal3.io/remediation": ""}}}))
        .calls(vec![Call::PowerState]),
        Row::new(
            "a power state the BMC cannot read fails power management",
            S::Available,
            Step::Fail(E::PowerManagement, "reading the power state: timeout".into()),
        )
        .with(|s| s.power_state = Some(failed("reading the power state: timeout")))
        .calls(vec![Call::PowerState]),
        Row::new(
            "a power change the BMC refuses fails power management",
            S::Available,
            Step::Fail(E::PowerManagement, "powering on: 500".into()),
        )
        .with(|s| s.set_power = failed("powering on: 500"))
        .calls(power(true)),
        Row::new("a power change under way stays", S::Available, stay_busy("powering on"))
            .with(|s| s.set_power = busy("powering on"))
            .calls(power(true)),
        // Provisioning.
        Row::new("a written image is provisioned", S::Provisioning, Step::Go(S::Provisioned))
            .host(json!({"spec": {"image": image()}}))
            .calls(vec![Call::Provision {
                image_url: IMAGE_URL.into(),
                power_on: true,
            }]),
        Row::new(
            "an image written while under way stays",
            S::Provisioning,
            stay_busy("deploy: writing 40%"),
        )
        .host(json!({"spec": {"image": image()}}))
        .with(|s| s.provision = busy("deploy: writing 40%"))
        .calls(vec![Call::Provision {
            image_url: IMAGE_URL.into(),
            power_on: true,
        }]),
        Row::new(
            "an image that fails to write fails provisioning",
            S::Provisioning,
            Step::Fail(E::Provisioning, "checksum mismatch".into()),
        )
        .host(json!({"spec": {"image": image()}}))
        .with(|s| s.provision = failed("checksum mismatch"))
        .calls(vec![Call::Provision {
            image_url: IMAGE_URL.into(),
            power_on: true,
        }]),
        Row::new(
            "an image with an empty checksum fails before anything boots",
            S::Provisioning,
            Step::Fail(
                E::Provisioning,
                "spec.image.checksum is empty: give the image's digest (and checksumType)".into(),
            ),
        )
        .host(json!({"spec": {"image": {"url": IMAGE_URL}}})),
        Row {
            config_drive: Err("Secret metal3/host-0-user-data not found".into()),
            ..Row::new(
                "a config drive that cannot be built fails provisioning",
                S::Provisioning,
                Step::Fail(E::Provisioning, "Secret metal3/host-0-user-data not found".into()),
            )
            .host(json!({"spec": {"image": image()}}))
        },
        Row::new(
            "a new image abandons the last attempt first",
            S::Provisioning,
            Step::Go(S::Provisioned),
        )
        .host(json!({
            "spec": {"image": image()},
            "status": {"lastAttemptedImage": {"url": "http://127.0.0.1:8080/images/old.img", "checksum": SHA256}},
        }))
        .calls(vec![
            Call::Release,
            Call::Provision {
                image_url: IMAGE_URL.into(),
                power_on: true,
            },
        ]),
        Row::new(
            "an image taken away while provisioning deprovisions",
            S::Provisioning,
            Step::Go(S::Deprovisioning),
        ),
        // Provisioned.
        Row::new("a provisioned host keeps its power", S::Provisioned, Step::stay(STEADY_RESYNC))
            .host(json!({"spec": {"image": image()}, "status": {"provisioning": {"image": image()}}}))
            .on()
            .calls(vec![Call::PowerState]),
        Row::new("a changed image deprovisions", S::Provisioned, Step::Go(S::Deprovisioning))
            .host(json!({
                "spec": {"image": {"url": "http://127.0.0.1:8080/images/new.img", "checksum": SHA256}},
                "status": {"provisioning": {"image": image()}},
            })),
        // Deprovisioning.
        Row::new("deprovisioning cleans and makes the host available", S::Deprovisioning, Step::Go(S::Available))
            .calls(vec![Call::Deprovision { clean: true }]),
        Row::new(
            "deprovisioning with cleaning disabled only powers off",
            S::Deprovisioning,
            Step::Go(S::Available),
        )
        .host(json!({"spec": {"automatedCleaningMode": "disabled"}}))
        .calls(vec![Call::Deprovision { clean: false }]),
        Row::new(
            "deprovisioning that fails",
            S::Deprovisioning,
            Step::Fail(E::Provisioning, "clean: disk busy".into()),
        )
        .with(|s| s.deprovision = failed("clean: disk busy"))
        .calls(vec![Call::Deprovision { clean: true }]),
        Row::new(
            "an externally provisioned host keeps its power",
            S::ExternallyProvisioned,
            Step::stay(STEADY_RESYNC),
        )
        .on()
        .calls(vec![Call::PowerState]),
        // Detached: nothing is touched.
        Row::new(
            "a detached host is left alone",
            S::Provisioned,
            Step::Stay { requeue: None, note: None },
        )
        .host(json!({"metadata": {"annotations": {"baremetalhost.metal3.io/detached": ""}}})),
        // Deletion.
        Row::new("deleting a provisioned host deprovisions it", S::Provisioned, Step::Go(S::Deprovisioning))
            .host(json!({"metadata": {"deletionTimestamp": NOW}, "spec": {"image": image()}})),
        Row::new(
            "deprovisioning a deleted host powers it off next",
            S::Deprovisioning,
            Step::Go(S::PoweringOffBeforeDelete),
        )
        .host(json!({"metadata": {"deletionTimestamp": NOW}}))
        .calls(vec![Call::Deprovision { clean: true }]),
        Row::new(
            "deleting an available host powers it off",
            S::Available,
            Step::Go(S::PoweringOffBeforeDelete),
        )
        .host(json!({"metadata": {"deletionTimestamp": NOW}})),
        Row::new(
            "deleting a host never reached goes at once",
            S::Registering,
            Step::Go(S::Deleting),
        )
        .host(json!({"metadata": {"deletionTimestamp": NOW}, "status": {"goodCredentials": null}})),
        Row::new(
            "deleting a detached provisioned host goes without touching it",
            S::Provisioned,
            Step::Go(S::Deleting),
        )
        .host(json!({"metadata": {"deletionTimestamp": NOW, "annotations": {"baremetalhost.metal3.io/detached": ""}}})),
        Row::new("powering off before delete, then deleting", S::PoweringOffBeforeDelete, Step::Go(S::Deleting))
            .host(json!({"metadata": {"deletionTimestamp": NOW}}))
            .on()
            .calls(vec![Call::SetPower(false)]),
        Row::new(
            "a failed power-off before delete is retried",
            S::PoweringOffBeforeDelete,
            Step::Fail(E::PowerManagement, "powering off: 500".into()),
        )
        .host(json!({"metadata": {"deletionTimestamp": NOW}}))
        .with(|s| s.set_power = failed("powering off: 500"))
        .calls(vec![Call::SetPower(false)]),
        Row::new(
            "after the last power-off attempt deletion goes on",
            S::PoweringOffBeforeDelete,
            Step::Go(S::Deleting),
        )
        .host(json!({"metadata": {"deletionTimestamp": NOW}, "status": {"errorCount": POWER_OFF_ATTEMPTS_BEFORE_DELETE - 1}}))
        .with(|s| s.set_power = failed("powering off: 500"))
        .calls(vec![Call::SetPower(false)]),
        Row::new(
            "disablePowerOff deletes without powering off",
            S::PoweringOffBeforeDelete,
            Step::Go(S::Deleting),
        )
        .host(json!({"metadata": {"deletionTimestamp": NOW}, "spec": {"disablePowerOff": true}})),
        Row::new("deleting releases the host", S::Deleting, Step::Released)
            .host(json!({"metadata": {"deletionTimestamp": NOW}}))
            .calls(vec![Call::Release]),
        Row::new(
            "a BMC that cannot eject does not keep a deleted host",
            S::Deleting,
            Step::Released,
        )
        .host(json!({"metadata": {"deletionTimestamp": NOW}}))
        .with(|s| s.release = failed("ejecting virtual media: 500"))
        .calls(vec![Call::Release]),
    ]
}

#[tokio::test]
async fn every_state_transition_failure_and_retry() {
    let rows = rows();
    let mut failures = Vec::new();
    for row in &rows {
        let ran = run(row).await;
        if ran.step.as_ref() != Ok(&row.expect) {
            failures.push(format!(
                "{}: step {:?}, want {:?}",
                row.name, ran.step, row.expect
            ));
        }
        if ran.calls != row.calls {
            failures.push(format!(
                "{}: calls {:?}, want {:?}",
                row.name, ran.calls, row.calls
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn every_state_has_rows() {
    let covered: std::collections::BTreeSet<&str> =
        rows().iter().map(|row| row.state.as_str()).collect();
    for state in [
        S::None,
        S::Unmanaged,
        S::Registering,
        S::Inspecting,
        S::Preparing,
        S::Available,
        S::Provisioning,
        S::Provisioned,
        S::Deprovisioning,
        S::ExternallyProvisioned,
        S::PoweringOffBeforeDelete,
        S::Deleting,
    ] {
        assert!(covered.contains(state.as_str()), "no row for {state}");
    }
}

#[tokio::test]
async fn what_a_pass_writes_besides_the_step() {
    // Registration records the credentials that worked.
    let row = Row {
        credentials_version: "7",
        ..Row::new("", S::Registering, Step::Go(S::Inspecting))
    };
    let ran = run(&row).await;
    let good = ran
        .status
        .good_credentials
        .and_then(|g| g.credentials_version);
    assert_eq!(good.as_deref(), Some("7"));

    // Inspection stores the hardware in the status and in a HardwareData, with an Event.
    let hardware = HardwareDetails {
        ram_mebibytes: Some(4096),
        ..HardwareDetails::default()
    };
    let row = Row::new("", S::Inspecting, Step::Go(S::Preparing))
        .with(|s| s.inspect = Answer::Progress(Progress::Done(hardware.clone())));
    let ran = run(&row).await;
    assert_eq!(ran.status.hardware.as_ref(), Some(&hardware));
    assert_eq!(ran.effects.hardware_data.as_ref(), Some(&hardware));
    assert_eq!(
        ran.effects.events.first().map(|e| e.0),
        Some("InspectionComplete")
    );

    // A provisioned image is recorded with the power the spec asked for.
    let row = Row::new("", S::Provisioning, Step::Go(S::Provisioned))
        .host(json!({"spec": {"image": image()}}));
    let ran = run(&row).await;
    assert_eq!(
        ran.status
            .provisioning
            .image
            .as_ref()
            .map(|i| i.url.as_str()),
        Some(IMAGE_URL)
    );
    assert_eq!(
        ran.status
            .last_attempted_image
            .as_ref()
            .map(|i| i.url.as_str()),
        Some(IMAGE_URL)
    );
    assert!(ran.status.powered_on && ran.powered_on);

    // A failed write counts against the host.
    let row = Row::new(
        "",
        S::Provisioning,
        Step::Fail(E::Provisioning, String::new()),
    )
    .host(json!({"spec": {"image": image()}, "status": {"provisioningFailCount": 2}}))
    .with(|s| s.provision = failed("checksum mismatch"));
    assert_eq!(run(&row).await.status.provisioning_fail_count, 3);

    // Deprovisioning forgets the image; deletion removes the HardwareData.
    let row = Row::new("", S::Deprovisioning, Step::Go(S::Available)).host(json!({
        "status": {"provisioning": {"image": image()}, "lastAttemptedImage": image(), "poweredOn": true}
    }));
    let ran = run(&row).await;
    assert!(ran.status.provisioning.image.is_none() && ran.status.last_attempted_image.is_none());
    assert!(!ran.status.powered_on);
    let row = Row::new("", S::Deleting, Step::Released)
        .host(json!({"metadata": {"deletionTimestamp": NOW}}));
    assert!(run(&row).await.effects.delete_hardware_data);

    // A one-shot reboot is dropped once the host is off; giving up a power-off says so.
    let row = Row::new("", S::Available, Step::stay(STEADY_RESYNC))
        .host(json!({"metadata": {"annotations": {"reboot.metal3.io": ""}}}));
    let ran = run(&row).await;
    assert_eq!(
        ran.effects.remove_annotations,
        vec!["reboot.metal3.io".to_owned()]
    );
    let row = Row::new("", S::PoweringOffBeforeDelete, Step::Go(S::Deleting))
        .host(json!({"metadata": {"deletionTimestamp": NOW}, "status": {"errorCount": 2}}))
        .with(|s| s.set_power = failed("powering off: 500"));
    let ran = run(&row).await;
    assert_eq!(
        ran.effects.events.first().map(|e| e.0),
        Some("DeletingWithoutPowerOff")
    );

    // The inspect annotation is consumed when it starts an inspection.
    let row = Row::new("", S::Available, Step::Go(S::Inspecting))
        .host(json!({"metadata": {"annotations": {"inspect.metal3.io": ""}}}));
    assert_eq!(
        run(&row).await.effects.remove_annotations,
        vec!["inspect.metal3.io".to_owned()]
    );
}

#[tokio::test]
async fn a_provisioner_the_api_server_fails_is_an_error_for_the_requeue() {
    let row = Row::new("", S::Inspecting, Step::Go(S::Preparing))
        .with(|s| s.inspect = Answer::ApiFailure);
    let ran = run(&row).await;
    assert!(ran.step.is_err(), "{:?}", ran.step);
}

/// What the controller does with each kind of step: the state and operation history on a
/// transition, the error count and backoff on a failure, the progress condition while busy.
#[test]
fn settling_a_step() {
    let mut before = BareMetalHostStatus::default();
    before.provisioning.state = S::Inspecting.as_str().into();
    before.error_count = 2;
    before.error_type = Some(E::Inspection.as_str().into());
    before.error_message = "timeout".into();
    before.operation_history.insert(
        "inspect".into(),
        capstan_model::metal3::OperationMetric {
            start: Some("2026-12-03T11:00:00Z".into()),
            end: None,
        },
    );

    // A transition clears the failure, ends the old operation and starts none (preparing runs
    // none), and requeues at once.
    let settled = settle(
        S::Inspecting,
        &before,
        before.clone(),
        &Step::Go(S::Preparing),
        NOW,
    );
    assert_eq!(settled.status.provisioning.state, "preparing");
    assert_eq!(settled.status.error_count, 0);
    assert!(settled.status.error_type.is_none() && settled.status.error_message.is_empty());
    assert_eq!(
        settled.status.operation_history["inspect"].end.as_deref(),
        Some(NOW)
    );
    assert_eq!(settled.transition, Some((S::Inspecting, S::Preparing)));
    assert_eq!(settled.action, Action::requeue(Duration::ZERO));

    // Going into an operation starts its history entry.
    let settled = settle(
        S::Available,
        &before,
        before.clone(),
        &Step::Go(S::Provisioning),
        NOW,
    );
    assert_eq!(
        settled.status.operation_history["provision"]
            .start
            .as_deref(),
        Some(NOW)
    );

    // A failure counts, keeps its type and message, warns, and backs off by the count.
    let step = Step::Fail(E::Inspection, "the agent did not call back".into());
    let settled = settle(S::Inspecting, &before, before.clone(), &step, NOW);
    assert_eq!(settled.status.error_count, 3);
    assert_eq!(
        settled.status.error_type.as_deref(),
        Some("inspection error")
    );
    assert_eq!(settled.action, Action::requeue(error_backoff(3)));
    assert_eq!(
        settled.warnings.first().map(|w| w.0),
        Some("InspectionError")
    );
    assert!(settled.transition.is_none());

    // Staying busy clears the message but keeps the count (the next failure backs off further),
    // and says what is under way in the progress condition.
    let settled = settle(
        S::Inspecting,
        &before,
        before.clone(),
        &stay_busy("inspect: running"),
        NOW,
    );
    assert_eq!(settled.status.error_count, 2);
    assert!(settled.status.error_type.is_none());
    let progress = settled
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_PROGRESS);
    assert_eq!(
        progress.and_then(|c| c.message.as_deref()),
        Some("inspect: running")
    );
    assert_eq!(settled.action, Action::requeue(Duration::from_secs(2)));

    // Nothing under way and nothing to wait for: only a change wakes the host.
    let settled = settle(
        S::Unmanaged,
        &before,
        settled.status,
        &Step::Stay {
            requeue: None,
            note: None,
        },
        NOW,
    );
    assert!(
        !settled
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_PROGRESS)
    );
    assert_eq!(settled.action, Action::await_change());
}
