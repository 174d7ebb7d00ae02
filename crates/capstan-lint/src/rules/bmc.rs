//! BareMetalHost BMC settings: an address scheme Metal3 knows, and a credentials Secret in the
//! host's namespace with `username` and `password` (its absence is skipped with `--partial`).
//!
//! `fake://` is capstan's own simulated BMC, which `capstan serve` drives: not an error, one note
//! for the set saying which hosts have no real machine behind them.

use capstan_model::metal3::parse_bmc_scheme;
use capstan_model::path::FieldPath;

use super::Ctx;
use super::network::secret_key;
use crate::catalogue::id;
use crate::diagnostic::Diagnostic;
use crate::embedded::field_text;
use crate::index::View;

/// The address scheme of capstan's simulated BMC.
const FAKE_SCHEME: &str = "fake://";

/// Runs the BMC rules.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    let mut fake = Vec::new();
    for (entry, host) in ctx.index.hosts() {
        let Some(bmc) = &host.spec.bmc else {
            continue;
        };
        if bmc.address.starts_with(FAKE_SCHEME) {
            fake.push(entry);
        } else if !bmc.address.is_empty() && parse_bmc_scheme(&bmc.address).is_none() {
            let scheme = bmc
                .address
                .split_once("://")
                .map_or(bmc.address.as_str(), |(s, _)| s);
            out.push(
                Diagnostic::new(
                    id::BMC_ADDRESS_SCHEME,
                    format!("BMC address scheme `{scheme}` is not one Metal3 knows"),
                    entry.at_str("spec.bmc.address"),
                )
                .why("the bare-metal operator cannot pick a driver; the host stays in registering")
                // The schemes capstan drives are the ones Metal3 knows that work everywhere.
                .hint(capstan_drivers::address::use_instead()),
            );
        }
        if bmc.address.is_empty() && bmc.credentials_name.is_empty() {
            continue;
        }
        let path = FieldPath::parse("spec.bmc.credentialsName");
        if bmc.credentials_name.is_empty() {
            out.push(
                Diagnostic::new(
                    id::BMC_CREDENTIALS,
                    "the BMC has an address but no credentialsName",
                    entry.at(&path),
                )
                .why("the bare-metal operator cannot log in to the BMC")
                .hint("set spec.bmc.credentialsName to a Secret with username and password"),
            );
            continue;
        }
        // BMC credentials must be in the host's own namespace.
        let secret = ctx
            .index
            .named(&bmc.credentials_name, entry.namespace())
            .find(|e| matches!(e.view, View::Secret | View::Invalid) && e.id.kind == "Secret");
        let Some(secret) = secret else {
            if !ctx.partial {
                out.push(
                    Diagnostic::new(
                        id::BMC_CREDENTIALS,
                        format!("BMC credentials Secret {} is not in the set", bmc.credentials_name),
                        entry.at(&path),
                    )
                    .why("the bare-metal operator cannot log in to the BMC; the host stays in registering")
                    .hint(format!("add a Secret {} with username and password keys in the host's namespace", bmc.credentials_name)),
                );
            }
            continue;
        };
        let missing: Vec<&str> = ["username", "password"]
            .into_iter()
            .filter(|key| {
                secret_key(secret, key)
                    .and_then(|(field, encoding)| field_text(secret.obj, &field, encoding))
                    .is_none_or(|v| v.is_empty())
            })
            .collect();
        if !missing.is_empty() {
            out.push(
                Diagnostic::new(
                    id::BMC_CREDENTIALS,
                    format!("BMC credentials {} has no {}", secret.id, missing.join(" or ")),
                    secret.at(&FieldPath::root()),
                )
                .why("the bare-metal operator reads `username` and `password`; without them it cannot log in to the BMC")
                .hint("set both keys in stringData (or base64 in data)")
                .related("used by this host", entry.at(&path)),
            );
        }
    }
    if let Some(first) = fake.first() {
        let names: Vec<String> = fake.iter().map(|e| e.id.name.clone()).collect();
        out.push(
            Diagnostic::new(
                id::BMC_ADDRESS_SCHEME,
                format!(
                    "{} with capstan's simulated BMC (fake://): {}",
                    if fake.len() == 1 { "1 host".to_owned() } else { format!("{} hosts", fake.len()) },
                    names.join(", ")
                ),
                first.at_str("spec.bmc.address"),
            )
            .with_severity(crate::diagnostic::Severity::Note)
            .why("`capstan serve` takes such hosts through their lifecycle with no machine behind them; Metal3's bare-metal operator does not know the scheme")
            .hint("give the hosts their real BMC addresses before using them with Metal3 or real machines"),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{BASE, has_rule, lint_text, lint_text_partial};

    #[test]
    fn schemes() {
        let bad = BASE.replacen(
            "address: redfish-virtualmedia+http://",
            "address: vmware://",
            1,
        );
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::BMC_ADDRESS_SCHEME));
        assert!(!has_rule(&lint_text(BASE), id::BMC_ADDRESS_SCHEME));
    }

    #[test]
    fn fake_bmcs_are_one_note_not_an_error() {
        let fake = BASE.replacen(
            "address: redfish-virtualmedia+http://",
            "address: fake://capi-1/x",
            2,
        );
        assert_ne!(fake, BASE);
        let report = lint_text(&fake);
        let findings: Vec<_> = report
            .diagnostics
            .iter()
            .filter(|d| d.rule == id::BMC_ADDRESS_SCHEME)
            .collect();
        assert_eq!(findings.len(), 1, "{}", report.render_human(false));
        assert_eq!(findings[0].severity, crate::diagnostic::Severity::Note);
        assert!(
            findings[0].message.starts_with("2 hosts"),
            "{}",
            findings[0].message
        );
        assert!(!report.has_errors(), "{}", report.render_human(false));
    }

    #[test]
    fn credentials() {
        let bad = BASE.replacen(
            "credentialsName: capi-1-cp-0-bmc",
            "credentialsName: nope",
            1,
        );
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::BMC_CREDENTIALS));
        assert!(!has_rule(&lint_text_partial(&bad), id::BMC_CREDENTIALS));
        let no_password = BASE.replacen("  password: secret-0\n", "", 1);
        assert_ne!(no_password, BASE);
        let report = lint_text_partial(&no_password);
        assert!(
            has_rule(&report, id::BMC_CREDENTIALS),
            "{}",
            report.render_human(false)
        );
    }
}
