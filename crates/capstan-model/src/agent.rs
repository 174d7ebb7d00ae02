//! The protocol between capstan and the agent that runs in the provisioning ramdisk.
//!
//! The exchange is level-triggered, like a controller: every few seconds the agent sends a
//! [`Heartbeat`] that carries everything it knows (the hardware it found, the state of the step it
//! runs or last ran) and gets back a [`HeartbeatResponse`] naming the one [`Command`] it should be
//! carrying out now. Neither side keeps state the other must remember: a capstan that restarts
//! learns where the agent is from its next heartbeat, and an agent told again to run an operation it
//! already runs or finished (same [`OperationId`]) keeps going rather than starting over. That is
//! what lets a provisioning survive a restart of the management plane without a second wipe.
//!
//! Every request carries `Authorization: Bearer <token>`, the one-time token the host's boot media
//! was built with ([`KERNEL_PARAM_TOKEN`]); the token alone says which host is talking.

use crate::metal3::{HardwareDetails, RootDeviceHints};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// Kernel parameter with the base URL of the provisioning server, as the host reaches it.
pub const KERNEL_PARAM_URL: &str = "capstan.url";
/// Kernel parameter with the host's one-time bearer token.
pub const KERNEL_PARAM_TOKEN: &str = "capstan.token";
/// Kernel parameter with the `namespace/name` of the host, for log lines only (never trusted).
pub const KERNEL_PARAM_HOST: &str = "capstan.host";

/// `POST`: a [`Heartbeat`] in, a [`HeartbeatResponse`] out.
pub const HEARTBEAT_PATH: &str = "/agent/v1/heartbeat";
/// `GET`: the host's own config drive, an ISO 9660 image labelled `config-2`.
pub const CONFIG_DRIVE_PATH: &str = "/agent/v1/configdrive";

/// Label of a config drive filesystem, as cloud-init's ConfigDrive source looks for it.
pub const CONFIG_DRIVE_LABEL: &str = "config-2";

/// The URL schemes the agent downloads images and checksum files from: plain HTTP only. The
/// ramdisk carries no CA certificates to verify an HTTPS server with, and an image's integrity
/// comes from its checksum, which the agent verifies as the image streams. The one list that the
/// host controller (before it boots a host), `capstan render` and `capstan lint` judge image URLs
/// by; the agent's tests hold its HTTP client to it.
pub const DOWNLOAD_SCHEMES: &[&str] = &["http"];

/// Why the agent cannot download from a URL. Each message ends with what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DownloadUrlError {
    /// A scheme other than those in [`DOWNLOAD_SCHEMES`].
    #[error(
        "{scheme}:// is not supported: the agent in capstan's ramdisk downloads over plain http://{}; {SERVE_OVER_HTTP}",
        if scheme.eq_ignore_ascii_case("https") {
            " (the ramdisk has no CA certificates to verify an HTTPS server with; the checksum guards the image)"
        } else {
            ""
        }
    )]
    NotSupported {
        /// The scheme as written.
        scheme: String,
    },
    /// No `scheme://` at all.
    #[error("{url:?} is not a URL; {SERVE_OVER_HTTP}")]
    NotAUrl {
        /// The text given.
        url: String,
    },
}

const SERVE_OVER_HTTP: &str = "serve the image over http://, or from capstan's images directory \
     (`capstan serve --images-dir`, served under /images/)";

/// Whether the agent can download from `url`: its scheme is one of [`DOWNLOAD_SCHEMES`].
pub fn check_download_url(url: &str) -> Result<(), DownloadUrlError> {
    match url.split_once("://") {
        Some((scheme, _)) if DOWNLOAD_SCHEMES.contains(&scheme) => Ok(()),
        Some((scheme, _)) if !scheme.is_empty() => Err(DownloadUrlError::NotSupported {
            scheme: scheme.to_owned(),
        }),
        _ => Err(DownloadUrlError::NotAUrl {
            url: url.to_owned(),
        }),
    }
}

/// Names one operation (an inspection, a deployment, a cleaning) so that repeating a command is
/// harmless: the agent runs each operation id at most once per boot.
pub type OperationId = String;

/// What the agent sends, every heartbeat.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    /// The agent's version, for diagnosis.
    #[serde(default)]
    pub agent_version: String,
    /// The hardware, once inspected (sent with every heartbeat after the inspection step).
    pub hardware: Option<HardwareDetails>,
    /// The step the agent runs now, or the last one it finished.
    pub step: Option<StepReport>,
}

/// The state of one step on the agent.
#[skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    pub operation: OperationId,
    pub kind: StepKind,
    pub phase: StepPhase,
    /// How far a running step is.
    pub progress: Option<Progress>,
    /// Why a step failed: one line that says what went wrong and where.
    pub error: Option<String>,
}

/// The kinds of step the agent carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StepKind {
    Inspect,
    Deploy,
    Clean,
}

/// Where a step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StepPhase {
    Running,
    Succeeded,
    Failed,
}

/// Progress of a running step.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// What the step does now (`downloading`, `verifying`, `writing config drive`, ...).
    #[serde(default)]
    pub stage: String,
    #[serde(default)]
    pub bytes_done: u64,
    pub bytes_total: Option<u64>,
}

/// What capstan answers to a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatResponse {
    pub command: Command,
    /// When to send the next heartbeat.
    pub heartbeat_seconds: u32,
}

/// The one thing the agent should be doing now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum Command {
    /// Nothing to do: keep heartbeating.
    Wait,
    /// Inspect the hardware and report it.
    Inspect { operation: OperationId },
    /// Write an image to the root device, then the config drive.
    Deploy(DeployCommand),
    /// Clean the root device before the host is reused.
    Clean(CleanCommand),
}

/// Image checksum algorithms (Metal3's `checksumType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumType {
    /// MD5, 32 hex digits.
    Md5,
    /// SHA-256, 64 hex digits.
    Sha256,
    /// SHA-512, 128 hex digits.
    Sha512,
}

impl ChecksumType {
    const ALL: [Self; 3] = [Self::Md5, Self::Sha256, Self::Sha512];

    /// Parses Metal3's `checksumType` (`md5`, `sha256`, `sha512`; `auto` is resolved by length).
    pub fn parse(value: &str, checksum: &str) -> Option<Self> {
        match value {
            "" | "auto" => Self::for_hex_len(checksum.len()),
            name => Self::from_name(name),
        }
    }

    /// The algorithm Metal3 spells `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The algorithm whose digests have `len` hex digits.
    pub fn for_hex_len(len: usize) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.hex_len() == len)
    }

    /// The algorithm's name as Metal3 spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Md5 => "md5",
            Self::Sha256 => "sha256",
            Self::Sha512 => "sha512",
        }
    }

    /// The length of the algorithm's digest in hex characters.
    pub fn hex_len(self) -> usize {
        match self {
            Self::Md5 => 32,
            Self::Sha256 => 64,
            Self::Sha512 => 128,
        }
    }
}

/// The digest an image must have (Metal3's `checksum` + `checksumType`).
#[skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum ImageChecksum {
    /// The digest itself, lower-case hex.
    Digest {
        value: String,
        algorithm: ChecksumType,
    },
    /// A checksum file beside the image (`SHA256SUMS`, `*.sha256`): `sha256sum`-style lines, BSD
    /// `SHA256 (NAME) = DIGEST` lines, or a lone digest. The agent fetches it and uses the line for
    /// the image's file name. Without `algorithm`, the digest's length decides.
    Url {
        url: String,
        algorithm: Option<ChecksumType>,
    },
}

/// Image formats (Metal3's `format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    /// Streamed straight to the device.
    Raw,
    /// Downloaded to memory, verified, then converted while written.
    Qcow2,
}

/// Deploy an image.
#[skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeployCommand {
    pub operation: OperationId,
    pub image_url: String,
    /// The digest the image must have, or where to find it.
    pub checksum: ImageChecksum,
    pub format: ImageFormat,
    pub root_device_hints: Option<RootDeviceHints>,
    /// Fetch the config drive from [`CONFIG_DRIVE_PATH`] and write it to a partition at the end
    /// of the root device.
    pub config_drive: bool,
}

/// How thoroughly to clean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CleanMode {
    /// Erase partition tables and filesystem signatures (Metal3's `metadata` mode).
    Metadata,
}

/// Clean the root device.
#[skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanCommand {
    pub operation: OperationId,
    pub mode: CleanMode,
    pub root_device_hints: Option<RootDeviceHints>,
}

impl Command {
    /// The operation this command names, if any.
    pub fn operation(&self) -> Option<&str> {
        match self {
            Command::Wait => None,
            Command::Inspect { operation } => Some(operation),
            Command::Deploy(deploy) => Some(&deploy.operation),
            Command::Clean(clean) => Some(&clean.operation),
        }
    }
}

/// Reads the agent's settings from a kernel command line (`/proc/cmdline`).
pub fn parse_kernel_cmdline(cmdline: &str) -> (Option<String>, Option<String>, Option<String>) {
    let mut url = None;
    let mut token = None;
    let mut host = None;
    for word in cmdline.split_whitespace() {
        if let Some((key, value)) = word.split_once('=') {
            match key {
                KERNEL_PARAM_URL => url = Some(value.to_owned()),
                KERNEL_PARAM_TOKEN => token = Some(value.to_owned()),
                KERNEL_PARAM_HOST => host = Some(value.to_owned()),
                _ => {}
            }
        }
    }
    (url, token, host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_is_downloaded() {
        assert_eq!(
            check_download_url("http://10.0.2.2:6180/images/disk.img"),
            Ok(())
        );
        let https = check_download_url("https://images.example/disk.img").unwrap_err();
        assert!(
            https.to_string().starts_with(
                "https:// is not supported: the agent in capstan's ramdisk downloads over plain \
                 http:// (the ramdisk has no CA certificates"
            ),
            "{https}"
        );
        assert!(https.to_string().contains("serve the image over http://"));
        assert_eq!(
            check_download_url("file:///var/lib/disk.img"),
            Err(DownloadUrlError::NotSupported {
                scheme: "file".into()
            })
        );
        for not_a_url in ["", "disk.img", "://x"] {
            assert!(
                matches!(
                    check_download_url(not_a_url),
                    Err(DownloadUrlError::NotAUrl { .. })
                ),
                "{not_a_url:?}"
            );
        }
    }

    #[test]
    fn commands_are_tagged_by_action() {
        let deploy = Command::Deploy(DeployCommand {
            operation: "op-1".into(),
            image_url: "http://10.0.2.2:6180/images/disk.img".into(),
            checksum: ImageChecksum::Digest {
                value: "ab".repeat(32),
                algorithm: ChecksumType::Sha256,
            },
            format: ImageFormat::Raw,
            root_device_hints: None,
            config_drive: true,
        });
        let json = serde_json::to_value(&deploy).unwrap();
        assert_eq!(json["action"], "deploy");
        assert_eq!(json["checksum"]["kind"], "digest");
        assert_eq!(json["checksum"]["algorithm"], "sha256");
        assert_eq!(serde_json::from_value::<Command>(json).unwrap(), deploy);
        let by_url = ImageChecksum::Url {
            url: "http://images/SHA256SUMS".into(),
            algorithm: None,
        };
        let json = serde_json::to_value(&by_url).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "url", "url": "http://images/SHA256SUMS"})
        );
        assert_eq!(
            serde_json::from_value::<ImageChecksum>(json).unwrap(),
            by_url
        );
        let wait = serde_json::to_value(Command::Wait).unwrap();
        assert_eq!(wait, serde_json::json!({"action": "wait"}));
    }

    #[test]
    fn checksum_type_auto_goes_by_length() {
        assert_eq!(
            ChecksumType::parse("auto", &"a".repeat(64)),
            Some(ChecksumType::Sha256)
        );
        assert_eq!(
            ChecksumType::parse("", &"a".repeat(32)),
            Some(ChecksumType::Md5)
        );
        assert_eq!(
            ChecksumType::parse("sha512", "x"),
            Some(ChecksumType::Sha512)
        );
        assert_eq!(ChecksumType::parse("crc32", "x"), None);
    }

    #[test]
    fn kernel_cmdline_settings() {
        let (url, token, host) = parse_kernel_cmdline(
            "console=ttyS0 capstan.url=http://10.0.2.2:6180 capstan.token=abc capstan.host=default/h0 quiet",
        );
        assert_eq!(url.as_deref(), Some("http://10.0.2.2:6180"));
        assert_eq!(token.as_deref(), Some("abc"));
        assert_eq!(host.as_deref(), Some("default/h0"));
    }
}
