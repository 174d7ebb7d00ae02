//! Redaction of what a node reports about its bootstrap: a failing command's output becomes a
//! condition message and an Event note, which anyone with `view` reads, while the node's
//! credentials (and the bootstrap data itself) are only for those who can read Secrets.
//!
//! [`redact`] removes, in this order: the caller's known secrets (the report token, the bootstrap
//! data's file contents and passwords, see [`BootstrapDataSecrets`]); PEM private keys, plain and
//! base64-encoded; credentials in URLs (`https://user:pass@host` → `https://<redacted>@host`);
//! `Authorization` headers; the values of `-u`/`--user`/`-p`/`--password`/`--token` (and kubeadm's
//! token and certificate-key flags); `password: …`-style settings; bearer credentials; kubeadm
//! bootstrap tokens; runs of 32 or more hex digits; and runs of 40 or more base64 characters. It
//! errs on the side of removing: a false positive costs a line of a diagnostic, a false negative
//! a credential.

use base64::Engine;
use regex::Regex;
use std::sync::LazyLock;

/// What replaces a redacted value.
pub const REDACTED: &str = "<redacted>";
/// What replaces a private key.
pub const REDACTED_KEY: &str = "<redacted private key>";
/// What replaces a line that quotes the bootstrap data.
pub const REDACTED_DATA: &str = "<redacted: bootstrap data>";
/// Lines of the bootstrap data shorter than this (trimmed) are too common to be told apart from
/// ordinary output (`---`, `- name: x`), and are not looked for.
const MIN_DATA_LINE: usize = 16;
/// Known secrets shorter than this are not replaced (they would match ordinary words).
const MIN_SECRET: usize = 6;

/// Base64 of `-----BEGIN` without its last, alignment-dependent character: a base64 run starting
/// with it is an encoded PEM block.
const BASE64_PEM_PREFIX: &str = "LS0tLS1CRUdJT";

/// Patterns and their replacements, applied in order.
static PATTERNS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        // PEM private keys; also one the output's tail cut the end off.
        (
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
            REDACTED_KEY,
        ),
        // ... and one the tail cut the beginning off: its last lines and the END line.
        (
            r"(?m)(?:^[A-Za-z0-9+/=]+\r?\n)*^[A-Za-z0-9+/=]*-----END [A-Z0-9 ]*PRIVATE KEY-----",
            REDACTED_KEY,
        ),
        // Credentials in URLs (user info), whatever the scheme.
        (
            r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\x22]+@",
            "${1}<redacted>@",
        ),
        // Authorization headers: everything up to the end of the line or the closing quote.
        (
            r#"(?i)\b((?:proxy-)?authorization\s*[:=]\s*)[^\r\n'"]+"#,
            "${1}<redacted>",
        ),
        // Flags whose value is a credential: `--password=x`, `--token x`, `-u user:pass`. A
        // short flag's value that is a path or a variable (`mkdir -p /var/lib/etcd`, `-p $P`) is
        // left alone: `-p` and `-u` mean other things to other commands.
        (
            r#"(?i)(^|[\s'"])(--(?:user|password|passwd|pass|token|discovery-token|tls-bootstrap-token|certificate-key|client-secret|secret)(?:=|\s+))('[^']*'|"[^"]*"|[^\s'"]+)"#,
            "${1}${2}<redacted>",
        ),
        (
            r#"(^|[\s'"])(-[up]\s*)('[^']*'|"[^"]*"|[^\s'"/.~$-][^\s'"]*)"#,
            "${1}${2}<redacted>",
        ),
        // Settings that carry secrets (`password: x`, `token=x`, JSON `"secret": "x"`).
        (
            r#"(?i)\b((?:password|passwd|secret|token|certificateKey|certificate-key|api[-_]?key|access[-_]?key)["']?\s*[:=]\s*)["']?[^\s"',]+"#,
            "${1}<redacted>",
        ),
        // Bearer credentials.
        (r"(?i)(bearer\s+)[^\s'\x22]+", "${1}<redacted>"),
        // Kubeadm bootstrap tokens.
        (r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b", "<redacted token>"),
        // Long hex runs: tokens, keys, digests.
        (r"\b[0-9A-Fa-f]{32,}\b", REDACTED),
    ]
    .into_iter()
    .filter_map(|(pattern, replacement)| Some((Regex::new(pattern).ok()?, replacement)))
    .collect()
});

/// A base64 run, possibly wrapped over lines (as `base64` wraps at 76 columns).
static BASE64_BLOCK: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9+/]{16,}={0,2}(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/]{4,}={0,2})*").ok()
});

/// A run of 40 or more base64 (or base64url) characters.
static BASE64_RUN: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/_-]{40,}={0,2}").ok());

/// Whether `run` looks like encoded bytes rather than a word, a path or a name: random bytes in
/// base64 have upper- and lower-case letters and digits within 40 characters, almost always; a
/// path or a hyphenated name has not.
fn looks_encoded(run: &str) -> bool {
    run.bytes().any(|b| b.is_ascii_uppercase())
        && run.bytes().any(|b| b.is_ascii_lowercase())
        && run.bytes().any(|b| b.is_ascii_digit())
}

/// Whether a base64 block decodes to a PEM block (`-----BEGIN`).
fn is_encoded_pem(block: &str) -> bool {
    if !block.starts_with(BASE64_PEM_PREFIX) {
        return false;
    }
    let compact: String = block.split_whitespace().collect();
    let engine = base64::engine::general_purpose::STANDARD;
    // A truncated block (the tail cut it) decodes in part: the leading whole quanta suffice.
    let whole = &compact[..compact.len() - compact.len() % 4];
    engine
        .decode(whole)
        .or_else(|_| engine.decode(whole.trim_end_matches('=')))
        .is_ok_and(|bytes| bytes.starts_with(b"-----BEGIN"))
}

/// `text` with known `secrets`, private keys, credentials, tokens and long encoded runs replaced.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    // Longest first, so a secret containing another is replaced whole.
    let mut known: Vec<&str> = secrets
        .iter()
        .copied()
        .filter(|s| s.len() >= MIN_SECRET)
        .collect();
    known.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in known {
        out = out.replace(secret, REDACTED);
    }
    for (pattern, replacement) in PATTERNS.iter() {
        out = pattern.replace_all(&out, *replacement).into_owned();
    }
    if let Some(block) = BASE64_BLOCK.as_ref() {
        out = block
            .replace_all(&out, |c: &regex::Captures<'_>| {
                if is_encoded_pem(&c[0]) {
                    REDACTED_KEY.to_owned()
                } else {
                    c[0].to_owned()
                }
            })
            .into_owned();
    }
    if let Some(run) = BASE64_RUN.as_ref() {
        out = run
            .replace_all(&out, |c: &regex::Captures<'_>| {
                if looks_encoded(&c[0]) {
                    REDACTED.to_owned()
                } else {
                    c[0].to_owned()
                }
            })
            .into_owned();
    }
    out
}

/// What of a node's bootstrap data a report must never quote back: the contents of the files it
/// writes (certificates and keys, the kubeadm configuration with its join token, files from
/// Secrets, the step runner with the report token) and the users' passwords.
#[derive(Clone, Debug, Default)]
pub struct BootstrapDataSecrets {
    /// Whole values (passwords), replaced wherever they appear.
    values: Vec<String>,
    /// Lines of file contents (trimmed): an output line containing one is replaced whole.
    lines: Vec<String>,
}

impl BootstrapDataSecrets {
    /// The secrets of a cloud-config (the data Secret's `value`). Content that cannot be read
    /// (gzip, unparsable YAML) contributes nothing: the patterns of [`redact`] still apply.
    pub fn from_cloud_config(cloud_config: &str) -> Self {
        let mut found = Self::default();
        let Ok(mut docs) = yaml_rust2::YamlLoader::load_from_str(cloud_config) else {
            return found;
        };
        if docs.is_empty() {
            return found;
        }
        let doc = docs.remove(0);
        for file in doc["write_files"].as_vec().into_iter().flatten() {
            let Some(content) = file["content"].as_str() else {
                continue;
            };
            let text = match file["encoding"].as_str() {
                None | Some("text/plain") => content.to_owned(),
                Some("b64" | "base64") => {
                    let compact: String = content.split_whitespace().collect();
                    match base64::engine::general_purpose::STANDARD.decode(compact) {
                        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                        Err(_) => continue,
                    }
                }
                Some(_) => continue,
            };
            found.add_lines(&text);
            // The encoded form too: `cat` of the cloud-config would show it so.
            if file["encoding"].as_str().is_some() {
                found.add_lines(content);
            }
        }
        for user in doc["users"].as_vec().into_iter().flatten() {
            if let Some(password) = user["passwd"].as_str() {
                found.values.push(password.to_owned());
            }
        }
        found.lines.sort();
        found.lines.dedup();
        found
    }

    fn add_lines(&mut self, text: &str) {
        self.lines.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| l.len() >= MIN_DATA_LINE)
                .map(str::to_owned),
        );
    }

    /// `text` with each line that quotes the bootstrap data replaced, and the passwords.
    pub fn scrub(&self, text: &str) -> String {
        let mut out: Vec<String> = Vec::new();
        for line in text.split_inclusive('\n') {
            let (body, end) = match line.strip_suffix('\n') {
                Some(body) => (body, "\n"),
                None => (line, ""),
            };
            if self
                .lines
                .iter()
                .any(|quoted| body.contains(quoted.as_str()))
            {
                out.push(format!("{REDACTED_DATA}{end}"));
            } else {
                out.push(line.to_owned());
            }
        }
        let mut out = out.concat();
        for value in self.values.iter().filter(|v| v.len() >= MIN_SECRET) {
            out = out.replace(value.as_str(), REDACTED);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM_KEY: &str = "-----BEGIN EC PRIVATE KEY-----\n\
        MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oK4WmsZtG2K2oAoGCCqGSM49\n\
        AwEHoUQDQgAEHqvBtpbtoZ2d3NUz5yeCHc3wYgYVbM52IOVjdKYjg2CepOPSfY7o\n\
        Zm9vYmFy\n\
        -----END EC PRIVATE KEY-----";

    fn encoded_pem() -> String {
        base64::engine::general_purpose::STANDARD.encode(PEM_KEY)
    }

    /// `(case, input, what must not survive, what must survive)`.
    fn redacted_cases() -> Vec<(&'static str, String, Vec<String>, Vec<&'static str>)> {
        let encoded = encoded_pem();
        // As `base64` prints it: wrapped at 76 columns.
        let wrapped = encoded
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect::<Vec<_>>()
            .join("\n");
        let hex48 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c".to_owned();
        vec![
            (
                "curl -u user:password",
                "+ curl -sf -u admin:hunter2-pass https://registry.example/v2/\ncurl: (22) 401"
                    .into(),
                vec!["hunter2-pass".into(), "admin:".into()],
                vec![
                    "curl: (22) 401",
                    "https://registry.example/v2/",
                    "-u <redacted>",
                ],
            ),
            (
                "curl --user=",
                "curl --user='admin:s3cr3t pw' x".into(),
                vec!["s3cr3t".into()],
                vec!["--user=<redacted>"],
            ),
            (
                "curl -uuser:pass glued",
                "curl -uadmin:gluedpass x".into(),
                vec!["gluedpass".into()],
                vec![],
            ),
            (
                "--password and -p",
                "mysql -p Sup3rS3cret --password hunter22 --token=abc123token".into(),
                vec![
                    "Sup3rS3cret".into(),
                    "hunter22".into(),
                    "abc123token".into(),
                ],
                vec!["mysql"],
            ),
            (
                "credentials in a URL",
                "fatal: unable to access 'https://deploy:gh-pass-0987@git.example/x.git/': 403"
                    .into(),
                vec!["gh-pass-0987".into(), "deploy".into()],
                vec!["https://<redacted>@git.example/x.git/", "403"],
            ),
            (
                "token as a URL user",
                "git clone https://ghp_abcdefghij0123456789@github.com/o/r".into(),
                vec!["ghp_abcdefghij0123456789".into()],
                vec!["@github.com/o/r"],
            ),
            (
                "Authorization header",
                "> Authorization: Basic YWRtaW46cGFzc3dvcmQ=\n> Accept: */*".into(),
                vec!["YWRtaW46cGFzc3dvcmQ".into()],
                vec!["Authorization: <redacted>", "> Accept: */*"],
            ),
            (
                "Authorization header in a quoted curl argument",
                "curl -H 'Authorization: token zzz-opaque-1' -H 'Accept: x' u".into(),
                vec!["zzz-opaque-1".into()],
                vec!["'Accept: x'"],
            ),
            (
                "plain PEM private key",
                format!("writing key\n{PEM_KEY}\ndone"),
                vec!["MHcCAQEE".into(), "Zm9vYmFy".into()],
                vec!["writing key", "done", REDACTED_KEY],
            ),
            (
                "PEM key cut off by the output tail",
                format!("x\n{}", &PEM_KEY[..80]),
                vec!["MHcCAQEE".into()],
                vec![],
            ),
            (
                "PEM key whose beginning the tail cut off",
                PEM_KEY[40..].to_owned(),
                vec!["Zm9vYmFy".into(), "AwEHoUQDQgAE".into()],
                vec![],
            ),
            (
                "base64-encoded PEM key",
                format!("key: {encoded} (from the Secret)"),
                vec![
                    encoded[..30].to_owned(),
                    encoded[encoded.len() - 12..].to_owned(),
                ],
                vec!["(from the Secret)"],
            ),
            (
                "base64-encoded PEM key, wrapped",
                format!("$ cat key.b64\n{wrapped}\n$"),
                // The last line of a wrapped key is short: no fragment survives.
                vec![
                    wrapped.lines().last().unwrap_or_default().to_owned(),
                    encoded[..30].to_owned(),
                ],
                vec!["$ cat key.b64"],
            ),
            (
                "48-hex token",
                format!("login failed for {hex48}: denied"),
                vec![hex48.clone()],
                vec!["login failed for <redacted>: denied"],
            ),
            (
                "long base64 run",
                "X-Api: dGhpcyBpcyBhIHZlcnkgc2VjcmV0IHRva2VuIHZhbHVlIDEyMzQ=".into(),
                vec!["dGhpcyBpcyBhIHZlcnkgc2VjcmV0".into()],
                vec!["X-Api: <redacted>"],
            ),
            (
                "kubeadm join token and certificate key",
                "kubeadm join --token abcdef.0123456789abcdef --certificate-key 0a1b2c".into(),
                vec!["abcdef.0123456789abcdef".into(), "0a1b2c".into()],
                vec!["kubeadm join"],
            ),
            (
                "password setting and bearer",
                "password: hunter22 and Authorization Bearer s3cr3t-value".into(),
                vec!["hunter22".into(), "s3cr3t-value".into()],
                vec![],
            ),
        ]
    }

    #[test]
    fn redact_removes_each_kind_of_secret() {
        for (case, input, gone, kept) in redacted_cases() {
            let out = redact(&input, &[]);
            for secret in &gone {
                assert!(
                    !out.contains(secret.as_str()),
                    "{case}: {secret:?} left in {out:?}"
                );
            }
            for text in kept {
                assert!(out.contains(text), "{case}: {text:?} lost from {out:?}");
            }
        }
    }

    #[test]
    fn redact_keeps_ordinary_output() {
        for input in [
            "Reading package lists... Done\nE: Unable to locate package kubelet",
            "error execution phase preflight: [preflight] Some fatal errors occurred:",
            "HEAD is now at 3f2a9c1 fix the build",
            "open /var/lib/kubelet/pki/kubelet-client-current.pem: no such file or directory",
            "/usr/share/kubernetes/manifests/kubeadmcontrolplaneconfiguration",
            "+ mkdir -p /var/lib/etcd\n+ cp ./kube-vip.yaml /etc/kubernetes/manifests/",
            "uuid 7c9e6679-7425-40de-944b-e07fc1f90ae7, sha256:12",
            "curl: (7) Failed to connect to 10.0.0.1 port 6443 after 0 ms: Connection refused",
            "ssh-keygen -p -f ~/.ssh/id_ed25519",
            "kube-apiserver-capi-1-controlplane-0-with-a-long-generated-name",
        ] {
            assert_eq!(redact(input, &[]), input);
        }
    }

    #[test]
    fn redact_replaces_known_secrets_longest_first() {
        let out = redact(
            "tok=sometoken-xyz123 and sometoken-xyz123456",
            &["sometoken-xyz123", "sometoken-xyz123456"],
        );
        assert!(!out.contains("sometoken"), "{out}");
        assert!(
            !out.contains("456"),
            "the longer secret is replaced whole: {out}"
        );
        // Too short to be told from ordinary words.
        assert_eq!(redact("a b c", &["b"]), "a b c");
    }

    #[test]
    fn redact_never_quotes_the_bootstrap_data() {
        let cloud_config = "## template: jinja\n#cloud-config\nwrite_files:\n\
            - path: /etc/app/config.ini\n  owner: root:root\n  permissions: '0600'\n  content: |\n    [db]\n    connection = postgres://app@db.internal/app\n    motd = welcome to the internal cluster\n\
            - path: /etc/app/b64.conf\n  encoding: b64\n  content: c2hhcmVkLXNlY3JldC1waHJhc2UtZm9yLXRoZS1hcHA=\n\
            users:\n- name: ops\n  passwd: opsPassw0rd!\nruncmd:\n- cat /etc/app/config.ini\n";
        let data = BootstrapDataSecrets::from_cloud_config(cloud_config);
        let output = "+ cat /etc/app/config.ini\n[db]\n    motd = welcome to the internal cluster\n\
            shared-secret-phrase-for-the-app\npassword for ops is opsPassw0rd!\nexit 1\n";
        let out = data.scrub(output);
        for quoted in [
            "welcome to the internal cluster",
            "shared-secret-phrase-for-the-app",
            "opsPassw0rd!",
        ] {
            assert!(!out.contains(quoted), "{quoted:?} in {out:?}");
        }
        // The command (not file content) and short lines stay; the line structure too.
        assert!(
            out.starts_with("+ cat /etc/app/config.ini\n[db]\n"),
            "{out}"
        );
        assert!(out.ends_with("exit 1\n"), "{out}");
        assert_eq!(out.matches(REDACTED_DATA).count(), 2, "{out}");
        // Nothing readable: nothing to look for.
        assert_eq!(
            BootstrapDataSecrets::from_cloud_config(": [").scrub("x\n"),
            "x\n"
        );
    }
}
