//! `capstan lint` and a real `capstan serve` agree: the objects the server refuses at admission
//! (`capstan apply` and `kubectl apply`, which both validate fields strictly), lint reports as
//! errors naming `file:line` and the field, and what lint passes, both apply.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

mod support;

use support::*;

const HOST: &str = "\
apiVersion: v1
kind: Secret
metadata:
  name: NAME-bmc
  namespace: default
stringData:
  username: admin
  password: secret
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: NAME
  namespace: default
spec:
  online: false
  bootMACAddress: 52:54:00:aa:00:01
  bmc:
    address: fake://lint-apply/NAME
    credentialsName: NAME-bmc
";

/// A host file named `name`, with `edit` applied to its text; returns its path and the line of
/// the field the edit is about (`needle`).
fn host_file(
    dir: &Path,
    name: &str,
    edit: impl Fn(&str) -> String,
    needle: &str,
) -> (String, usize) {
    let text = edit(&HOST.replace("NAME", name));
    let line = text
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in {text}"))
        + 1;
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    (path.to_str().unwrap().to_owned(), line)
}

#[test]
fn lint_refuses_what_apply_refuses_and_passes_what_it_accepts() {
    let work = tempfile::tempdir().unwrap();
    let files = work.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let log = work.path().join("serve.log");
    let server = Serve::start_with(&work.path().join("data"), &log, &[]);
    let kc = server.kubeconfig.clone();

    // A well-formed host: lint passes it and both clients apply it.
    let (good, _) = host_file(&files, "good", str::to_owned, "bootMACAddress:");
    let (ok, out) = capstan(&kc, &["lint", &good]);
    assert!(ok, "lint {good}: {out}");
    let (ok, out) = capstan(&kc, &["apply", "-f", &good]);
    assert!(ok, "capstan apply {good}: {out}");

    let cases: [(&str, &str, &str, &str); 4] = [
        (
            "bad-hex",
            "52:54:00:zz:00:01",
            "bootMACAddress:",
            "spec.bootMACAddress",
        ),
        (
            "five-octets",
            "52:54:00:00:01",
            "bootMACAddress:",
            "spec.bootMACAddress",
        ),
        ("misspelt", "", "bootMACAdress:", "spec.bootMACAdress"),
        (
            "misspelt-bmc",
            "",
            "credentialName:",
            "spec.bmc.credentialName",
        ),
    ];
    for (name, mac, needle, field) in cases {
        let (file, line) = host_file(
            &files,
            name,
            |text| match name {
                "misspelt" => text.replace("bootMACAddress:", "bootMACAdress:"),
                "misspelt-bmc" => text.replace("credentialsName:", "credentialName:"),
                _ => text.replace("52:54:00:aa:00:01", mac),
            },
            needle,
        );
        // lint: an error (exit 1) at the field's line, naming the field.
        let (ok, out) = capstan(&kc, &["lint", &file]);
        assert!(!ok, "lint passed {name}: {out}");
        assert!(
            out.contains("error["),
            "{name}: lint reports no error:\n{out}"
        );
        assert!(
            out.contains(&format!("{file}:{line} ")) && out.contains(field),
            "{name}: lint does not name {file}:{line} and {field}:\n{out}"
        );
        // capstan apply and kubectl apply: refused, nothing stored.
        let (ok, out) = capstan(&kc, &["apply", "-f", &file]);
        assert!(!ok, "capstan apply accepted {name}: {out}");
        let leaf = field.rsplit('.').next().unwrap();
        assert!(
            out.contains(leaf),
            "{name}: capstan apply does not name {leaf}:\n{out}"
        );
        let (ok, out) = kubectl(&kc, &["apply", "-f", &file]);
        assert!(!ok, "kubectl apply accepted {name}: {out}");
        assert!(
            out.contains(leaf),
            "{name}: kubectl apply does not name {leaf}:\n{out}"
        );
        let (exists, out) = kubectl(&kc, &["get", "baremetalhost", name]);
        assert!(!exists, "{name} was stored: {out}");
    }
}
