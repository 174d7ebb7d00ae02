//! Deployment: stream the image to the root device while hashing it, verify the digest, then write
//! the config drive.
//!
//! A raw image goes straight to the device, read and written in 4 MiB blocks by two threads so the
//! network and the disk work at the same time. A qcow2 image is downloaded into memory (the ramdisk
//! is RAM), verified, and converted cluster by cluster as it is written. A dropped connection is
//! resumed with a `Range` request from where it stopped, with the same running digest, so an image
//! server that restarts (capstan's own, for one) costs a reconnect, not a rewrite.
//!
//! On a digest mismatch the first MiB of the device is zeroed, so the host cannot boot a
//! half-trusted image, and the step fails naming both digests.

use crate::http::{self, Url};
use capstan_model::agent::{ChecksumType, ImageFormat, Progress};
use md5::Md5;
use sha2::{Digest, Sha256, Sha512};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::mpsc;
use std::time::Duration;

const BLOCK: usize = 4 << 20;
/// How often a dropped download is resumed before the step fails.
const RESUME_ATTEMPTS: u32 = 30;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a deployment failed.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error("downloading {url}")]
    Http {
        url: String,
        #[source]
        source: http::HttpError,
    },
    #[error("downloading {url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("downloading {url}: gave up after {attempts} interrupted attempts")]
    Interrupted { url: String, attempts: u32 },
    #[error(
        "checksum mismatch for {url}: expected {checksum_type} {expected}, got {actual}; the device's first MiB was zeroed"
    )]
    Checksum {
        url: String,
        checksum_type: &'static str,
        expected: String,
        actual: String,
    },
    #[error("{what} {device}")]
    Device {
        what: &'static str,
        device: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the image ({image} bytes) is larger than {device} ({device_bytes} bytes)")]
    TooLarge {
        image: u64,
        device: String,
        device_bytes: u64,
    },
    #[error("converting the qcow2 image")]
    Qcow2(#[source] Box<dyn std::error::Error + Send + Sync>),
}

enum Hasher {
    Md5(Md5),
    Sha256(Sha256),
    Sha512(Sha512),
}

impl Hasher {
    fn new(kind: ChecksumType) -> Self {
        match kind {
            ChecksumType::Md5 => Self::Md5(Md5::new()),
            ChecksumType::Sha256 => Self::Sha256(Sha256::new()),
            ChecksumType::Sha512 => Self::Sha512(Sha512::new()),
        }
    }
    fn update(&mut self, data: &[u8]) {
        match self {
            Self::Md5(h) => h.update(data),
            Self::Sha256(h) => h.update(data),
            Self::Sha512(h) => h.update(data),
        }
    }
    fn hex(self) -> String {
        let bytes: Vec<u8> = match self {
            Self::Md5(h) => h.finalize().to_vec(),
            Self::Sha256(h) => h.finalize().to_vec(),
            Self::Sha512(h) => h.finalize().to_vec(),
        };
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// What to deploy, where.
pub struct DeployJob<'a> {
    pub url: &'a str,
    pub checksum: &'a str,
    pub checksum_type: ChecksumType,
    pub format: ImageFormat,
    pub device_path: &'a std::path::Path,
    pub device_bytes: u64,
}

/// Streams the image from `url` through `sink(offset, bytes)`, resuming after dropped connections;
/// returns the digest of everything received.
fn download(
    url: &str,
    kind: ChecksumType,
    report: &dyn Fn(Progress),
    mut sink: impl FnMut(u64, Vec<u8>) -> Result<(), DeployError>,
) -> Result<(String, u64), DeployError> {
    let parsed = Url::parse(url).map_err(|source| DeployError::Http {
        url: url.to_owned(),
        source,
    })?;
    let mut hasher = Hasher::new(kind);
    let mut offset = 0u64;
    let mut total: Option<u64> = None;
    let mut failures = 0u32;
    loop {
        let range = format!("bytes={offset}-");
        let headers: Vec<(&str, &str)> = if offset > 0 {
            vec![("Range", range.as_str())]
        } else {
            Vec::new()
        };
        let response = match http::request("GET", &parsed, &headers, None, TIMEOUT) {
            Ok(r) => r,
            Err(err) => {
                failures += 1;
                if failures >= RESUME_ATTEMPTS {
                    return Err(DeployError::Http {
                        url: url.to_owned(),
                        source: err,
                    });
                }
                println!("capstan-agent: download interrupted at {offset} bytes ({err}); retrying");
                std::thread::sleep(Duration::from_secs(u64::from(failures.min(5))));
                continue;
            }
        };
        match response.status {
            200 => {
                if offset > 0 {
                    // The server ignored the range: start over, digest included.
                    println!(
                        "capstan-agent: the server does not resume; downloading from the start"
                    );
                    hasher = Hasher::new(kind);
                    offset = 0;
                }
                total = response.content_length();
            }
            206 => {
                if total.is_none() {
                    total = response
                        .header("content-range")
                        .and_then(|v| v.rsplit('/').next())
                        .and_then(|v| v.parse().ok());
                }
            }
            status => {
                return Err(DeployError::Status {
                    url: url.to_owned(),
                    status,
                });
            }
        }
        let mut body = response;
        let mut interrupted = false;
        loop {
            let mut block = vec![0u8; BLOCK];
            let mut filled = 0;
            while filled < BLOCK {
                match body.read(&mut block[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(err) => {
                        println!(
                            "capstan-agent: download interrupted at {} bytes ({err}); resuming",
                            offset + filled as u64
                        );
                        interrupted = true;
                        break;
                    }
                }
            }
            if filled == 0 {
                break;
            }
            block.truncate(filled);
            hasher.update(&block);
            let at = offset;
            offset += filled as u64;
            sink(at, block)?;
            report(Progress {
                stage: "writing image".into(),
                bytes_done: offset,
                bytes_total: total,
            });
            if interrupted {
                break;
            }
        }
        if !interrupted && total.is_none_or(|t| offset >= t) {
            return Ok((hasher.hex(), offset));
        }
        failures += 1;
        if failures >= RESUME_ATTEMPTS {
            return Err(DeployError::Interrupted {
                url: url.to_owned(),
                attempts: failures,
            });
        }
        std::thread::sleep(Duration::from_secs(u64::from(failures.min(5))));
    }
}

fn device_error(
    what: &'static str,
    device: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> DeployError {
    let device = device.display().to_string();
    move |source| DeployError::Device {
        what,
        device,
        source,
    }
}

/// Writes the image of `job` to its device; returns the bytes written.
pub fn write_image(job: &DeployJob<'_>, report: &dyn Fn(Progress)) -> Result<u64, DeployError> {
    let device_name = job.device_path.display().to_string();
    let mut file = File::options()
        .write(true)
        .read(true)
        .open(job.device_path)
        .map_err(device_error("opening", job.device_path))?;
    let (digest, written) = match job.format {
        ImageFormat::Raw => {
            // A writer thread keeps the disk busy while the next block downloads.
            let (tx, rx) = mpsc::sync_channel::<(u64, Vec<u8>)>(4);
            let mut writer_file = file
                .try_clone()
                .map_err(device_error("opening", job.device_path))?;
            let device_bytes = job.device_bytes;
            let device_for_thread = device_name.clone();
            let writer = std::thread::spawn(move || -> Result<(), DeployError> {
                for (offset, block) in rx {
                    if offset + block.len() as u64 > device_bytes {
                        return Err(DeployError::TooLarge {
                            image: offset + block.len() as u64,
                            device: device_for_thread,
                            device_bytes,
                        });
                    }
                    writer_file
                        .seek(SeekFrom::Start(offset))
                        .and_then(|_| writer_file.write_all(&block))
                        .map_err(|source| DeployError::Device {
                            what: "writing",
                            device: device_for_thread.clone(),
                            source,
                        })?;
                }
                Ok(())
            });
            let downloaded = download(job.url, job.checksum_type, report, |offset, block| {
                tx.send((offset, block)).map_err(|_| DeployError::Device {
                    what: "writing",
                    device: device_name.clone(),
                    source: std::io::Error::other("the writer stopped"),
                })
            });
            drop(tx);
            let wrote = writer.join().unwrap_or_else(|_| {
                Err(DeployError::Device {
                    what: "writing",
                    device: device_name.clone(),
                    source: std::io::Error::other("writer panicked"),
                })
            });
            // The writer's error explains a failed send better than the send does.
            wrote?;
            downloaded?
        }
        ImageFormat::Qcow2 => {
            let mut image = Vec::new();
            let (digest, size) = download(job.url, job.checksum_type, report, |_, block| {
                image.extend_from_slice(&block);
                Ok(())
            })?;
            if digest == job.checksum.to_ascii_lowercase() {
                let qcow = crate::qcow2::Qcow2::parse(&image)
                    .map_err(|e| DeployError::Qcow2(Box::new(e)))?;
                if qcow.virtual_size() > job.device_bytes {
                    return Err(DeployError::TooLarge {
                        image: qcow.virtual_size(),
                        device: device_name,
                        device_bytes: job.device_bytes,
                    });
                }
                let total = qcow.virtual_size();
                qcow.for_each_cluster(|offset, bytes| {
                    file.seek(SeekFrom::Start(offset))?;
                    file.write_all(bytes)?;
                    if offset % (64 << 20) == 0 {
                        report(Progress {
                            stage: "converting qcow2".into(),
                            bytes_done: offset,
                            bytes_total: Some(total),
                        });
                    }
                    Ok(())
                })
                .map_err(DeployError::Qcow2)?;
                (digest, total)
            } else {
                (digest, size)
            }
        }
    };
    if digest != job.checksum.to_ascii_lowercase() {
        let zeros = vec![0u8; 1 << 20];
        let _ = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&zeros))
            .and_then(|_| file.sync_all());
        return Err(DeployError::Checksum {
            url: job.url.to_owned(),
            checksum_type: job.checksum_type.name(),
            expected: job.checksum.to_ascii_lowercase(),
            actual: digest,
        });
    }
    file.sync_all()
        .map_err(device_error("syncing", job.device_path))?;
    Ok(written)
}
