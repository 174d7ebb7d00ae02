//! Schemes capstan cannot use: a BareMetalHost BMC address Metal3 knows but capstan's drivers do
//! not serve (`ipmi://`, `redfish-uefihttp://`, a bare host, …), and an image or checksum URL the
//! agent in capstan's ramdisk cannot download (`https://`: the ramdisk has no CA certificates).
//!
//! The judges are the lists registration and provisioning themselves use
//! ([`capstan_drivers::SCHEMES`], [`capstan_model::agent::DOWNLOAD_SCHEMES`]), so lint passes no
//! address that fails later for its scheme. Schemes Metal3 does not know at all are
//! `bmc-address-scheme`'s, not reported twice here.

use capstan_drivers::SchemeError;
use capstan_model::agent::check_download_url;
use capstan_model::path::FieldPath;

use super::Ctx;
use crate::catalogue::id;
use crate::diagnostic::Diagnostic;
use crate::index::{Entry, M3MT_SPEC_PATH, View};

/// Runs the scheme rule.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for entry in &ctx.index.entries {
        match &entry.view {
            View::Host(host) => {
                if let Some(bmc) = host.spec.bmc.as_ref().filter(|b| !b.address.is_empty()) {
                    check_bmc(entry, &bmc.address, out);
                }
                if let Some(image) = &host.spec.image {
                    let base = FieldPath::parse("spec.image");
                    check_image(entry, &base, &image.url, image.checksum.as_deref(), out);
                }
            }
            View::MachineTemplate(spec) => {
                if let Some(image) = &spec.image {
                    let base = FieldPath::parse(M3MT_SPEC_PATH).key("image");
                    check_image(entry, &base, &image.url, image.checksum.as_deref(), out);
                }
            }
            // A Metal3Machine (in a `kubectl get -o yaml` dump) carries the image its host gets.
            View::Checked
                if entry.id.kind == "Metal3Machine"
                    && entry.group() == "infrastructure.cluster.x-k8s.io" =>
            {
                let image = &entry.obj.value["spec"]["image"];
                if let Some(url) = image["url"].as_str() {
                    let checksum = image["checksum"].as_str();
                    check_image(entry, &FieldPath::parse("spec.image"), url, checksum, out);
                }
            }
            _ => {}
        }
    }
}

fn check_bmc(entry: &Entry<'_>, address: &str, out: &mut Vec<Diagnostic>) {
    match capstan_drivers::scheme_of(address) {
        Ok(_) | Err(SchemeError::Unknown { .. }) => {}
        Err(err) => out.push(
            Diagnostic::new(
                id::UNSUPPORTED_SCHEME,
                err.to_string(),
                entry.at_str("spec.bmc.address"),
            )
            .why("capstan's BareMetalHost controller has no driver for this scheme: the host stays in `registering` with a registration error")
            .hint("capstan drives Redfish BMCs through virtual media, and its simulated fake:// BMC; docs/bmc.md lists the schemes"),
        ),
    }
}

fn check_image(
    entry: &Entry<'_>,
    base: &FieldPath,
    url: &str,
    checksum: Option<&str>,
    out: &mut Vec<Diagnostic>,
) {
    let checksum_url = checksum.map(str::trim).filter(|c| c.contains("://"));
    let urls = [
        ("url", Some(url).filter(|u| !u.is_empty())),
        ("checksum", checksum_url),
    ];
    for (field, value) in urls {
        let Some(value) = value else {
            continue;
        };
        if let Err(err) = check_download_url(value) {
            out.push(
                Diagnostic::new(id::UNSUPPORTED_SCHEME, err.to_string(), entry.at(&base.key(field)))
                    .why("the agent downloads the image and its checksum file itself, over plain HTTP; capstan refuses any other URL before it boots the host, which stays in `provisioning` with a provisioning error")
                    .hint("serve the image (and the checksum file) over http://: the checksum, which the agent verifies as the image streams, guards its integrity"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{BASE, has_rule, lint_text};

    #[test]
    fn a_metal3_machine_image_is_checked_too() {
        let machine = "\
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3Machine
metadata:
  name: capi-1-controlplane-abcde
  namespace: default
spec:
  image:
    url: https://netboot.example/fedora-43-ext4-k8s.raw
    checksum: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    checksumType: sha256
";
        let report = lint_text(&format!("{BASE}{machine}"));
        assert!(
            has_rule(&report, id::UNSUPPORTED_SCHEME),
            "{}",
            report.render_human(false)
        );
        let plain = machine.replace("https://", "http://");
        assert!(!has_rule(
            &lint_text(&format!("{BASE}{plain}")),
            id::UNSUPPORTED_SCHEME
        ));
    }

    #[test]
    fn schemes_metal3_does_not_know_are_left_to_bmc_address_scheme() {
        let bad = BASE.replacen(
            "address: redfish-virtualmedia+http://",
            "address: vmware://",
            1,
        );
        let report = lint_text(&bad);
        assert!(has_rule(&report, id::BMC_ADDRESS_SCHEME));
        assert!(!has_rule(&report, id::UNSUPPORTED_SCHEME));
    }
}
