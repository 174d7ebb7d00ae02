//! The image digest when `spec.image.checksum` is a URL: the agent fetches the checksum file from
//! beside the image, as the hosts fetch images, and picks the line for the image's file name.
//!
//! Accepted files, as distributions publish them:
//! - `sha256sum` / `md5sum` output: `DIGEST  NAME` or `DIGEST *NAME` (binary mode), one per line;
//! - BSD `--tag` output: `SHA256 (NAME) = DIGEST`;
//! - a lone digest (a `disk.img.sha256` holding only the digest, maybe followed by a name).
//!
//! Blank lines and `#` comments are skipped. A file listing several images must name the image's
//! file name; a lone entry is used whatever name it carries.

use capstan_model::agent::ChecksumType;
use std::time::Duration;

/// Checksum files are small; a larger answer is not one.
const MAX_CHECKSUM_FILE: u64 = 4 << 20;

/// Why no digest could be taken from a checksum URL.
#[derive(Debug, thiserror::Error)]
pub enum ChecksumFileError {
    #[error("fetching the checksum file {url}")]
    Fetch {
        url: String,
        #[source]
        source: crate::http::HttpError,
    },
    #[error("fetching the checksum file {url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("the checksum file {url} is not text")]
    NotText { url: String },
    #[error("the checksum file {url} lists no digest")]
    Empty { url: String },
    #[error("the checksum file {url} has no line for {file_name:?} (it lists: {listed})")]
    NoEntry {
        url: String,
        file_name: String,
        listed: String,
    },
    #[error(
        "the checksum file {url} gives {file_name:?} the {len}-character digest {digest:?}, \
         which is not a {expected} digest"
    )]
    WrongAlgorithm {
        url: String,
        file_name: String,
        digest: String,
        len: usize,
        expected: String,
    },
}

/// Fetches the checksum file at `url` and returns the digest (lower-case hex) and algorithm for
/// the image at `image_url`.
pub fn resolve(
    url: &str,
    algorithm: Option<ChecksumType>,
    image_url: &str,
) -> Result<(String, ChecksumType), ChecksumFileError> {
    let fetch = |source| ChecksumFileError::Fetch {
        url: url.to_owned(),
        source,
    };
    let parsed = crate::http::Url::parse(url).map_err(fetch)?;
    let response =
        crate::http::request("GET", &parsed, &[], None, Duration::from_secs(60)).map_err(fetch)?;
    if response.status != 200 {
        return Err(ChecksumFileError::Status {
            url: url.to_owned(),
            status: response.status,
        });
    }
    let body = response.bytes(MAX_CHECKSUM_FILE).map_err(fetch)?;
    let text = String::from_utf8(body).map_err(|_| ChecksumFileError::NotText {
        url: url.to_owned(),
    })?;
    digest_for(&text, url, algorithm, image_url)
}

/// The digest for `image_url` in the checksum file `text` (fetched from `url`).
pub fn digest_for(
    text: &str,
    url: &str,
    algorithm: Option<ChecksumType>,
    image_url: &str,
) -> Result<(String, ChecksumType), ChecksumFileError> {
    let file_name = file_name(image_url);
    let entries: Vec<Entry<'_>> = text.lines().filter_map(parse_line).collect();
    let entry = match entries.as_slice() {
        [] => {
            return Err(ChecksumFileError::Empty {
                url: url.to_owned(),
            });
        }
        [only] => only,
        _ => entries
            .iter()
            .find(|entry| entry.name == Some(file_name))
            .ok_or_else(|| ChecksumFileError::NoEntry {
                url: url.to_owned(),
                file_name: file_name.to_owned(),
                listed: entries
                    .iter()
                    .filter_map(|e| e.name)
                    .take(10)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?,
    };
    let digest = entry.digest.to_ascii_lowercase();
    let wrong = |expected: String| ChecksumFileError::WrongAlgorithm {
        url: url.to_owned(),
        file_name: file_name.to_owned(),
        digest: digest.clone(),
        len: digest.len(),
        expected,
    };
    // The algorithm: the one asked for, else the one a BSD line names, else the digest's length.
    let wanted = algorithm.or(entry.tag);
    let by_length = ChecksumType::for_hex_len(digest.len());
    match (wanted, by_length) {
        (Some(kind), _) if kind.hex_len() == digest.len() => Ok((digest, kind)),
        (Some(kind), _) => Err(wrong(kind.name().to_owned())),
        (None, Some(kind)) => Ok((digest, kind)),
        (None, None) => Err(wrong("md5, sha256 or sha512".to_owned())),
    }
}

/// One digest line.
#[derive(Debug, PartialEq)]
struct Entry<'a> {
    digest: &'a str,
    name: Option<&'a str>,
    /// The algorithm a BSD-style line names.
    tag: Option<ChecksumType>,
}

fn parse_line(line: &str) -> Option<Entry<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    // BSD: `SHA256 (disk.img) = 0123…`
    if let Some((head, digest)) = line.rsplit_once(" = ")
        && let Some((tag, rest)) = head.split_once(" (")
        && let Some(name) = rest.strip_suffix(')')
    {
        let tag = ChecksumType::from_name(&tag.to_ascii_lowercase());
        return is_hex(digest.trim()).then_some(Entry {
            digest: digest.trim(),
            name: Some(name),
            tag,
        });
    }
    // GNU: `0123…  disk.img`, `0123… *disk.img`, or the digest alone.
    let (digest, name) = match line.split_once(char::is_whitespace) {
        Some((digest, name)) => (digest, Some(name.trim_start().trim_start_matches('*'))),
        None => (line, None),
    };
    is_hex(digest).then_some(Entry {
        digest,
        name: name.filter(|n| !n.is_empty()),
        tag: None,
    })
}

fn is_hex(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The last path segment of a URL, without query or fragment.
fn file_name(url: &str) -> &str {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const URL: &str = "http://images/SHA256SUMS";
    const IMAGE: &str = "http://images/os/disk.img";

    fn hex(c: char, n: usize) -> String {
        c.to_string().repeat(n)
    }

    #[test]
    fn gnu_lines_pick_the_image_by_file_name() {
        let text = format!(
            "# published digests\n{}  other.img\n{} *disk.img\n\n{}  disk.qcow2\n",
            hex('a', 64),
            hex('B', 64),
            hex('c', 64)
        );
        let (digest, kind) = digest_for(&text, URL, None, IMAGE).unwrap();
        assert_eq!(digest, hex('b', 64));
        assert_eq!(kind, ChecksumType::Sha256);
    }

    #[test]
    fn bsd_lines_name_their_algorithm() {
        let text = format!(
            "SHA512 (other.img) = {}\nSHA512 (disk.img) = {}\n",
            hex('1', 128),
            hex('2', 128)
        );
        let (digest, kind) = digest_for(&text, URL, None, IMAGE).unwrap();
        assert_eq!(digest, hex('2', 128));
        assert_eq!(kind, ChecksumType::Sha512);
    }

    #[test]
    fn a_lone_digest_is_used_whatever_its_name() {
        for text in [
            format!("{}\n", hex('d', 32)),
            format!("{}  renamed.img\n", hex('d', 32)),
        ] {
            let (digest, kind) = digest_for(&text, URL, None, IMAGE).unwrap();
            assert_eq!(
                (digest.as_str(), kind),
                (hex('d', 32).as_str(), ChecksumType::Md5)
            );
        }
    }

    #[test]
    fn query_strings_do_not_hide_the_file_name() {
        let text = format!("{}  x.img\n{}  disk.img\n", hex('a', 64), hex('e', 64));
        let (digest, _) = digest_for(&text, URL, None, "http://i/disk.img?token=1").unwrap();
        assert_eq!(digest, hex('e', 64));
    }

    #[test]
    fn a_missing_entry_lists_what_the_file_has() {
        let text = format!("{}  a.img\n{}  b.img\n", hex('a', 64), hex('b', 64));
        let err = digest_for(&text, URL, None, IMAGE).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, ChecksumFileError::NoEntry { .. }), "{err:?}");
        assert!(message.contains("\"disk.img\""), "{message}");
        assert!(message.contains("a.img, b.img"), "{message}");
        assert!(message.contains(URL), "{message}");
    }

    #[test]
    fn the_asked_algorithm_must_fit_the_digest() {
        let text = format!("{}  disk.img\n", hex('a', 64));
        let err = digest_for(&text, URL, Some(ChecksumType::Sha512), IMAGE).unwrap_err();
        assert!(err.to_string().contains("not a sha512 digest"), "{err}");
        let (_, kind) = digest_for(&text, URL, Some(ChecksumType::Sha256), IMAGE).unwrap();
        assert_eq!(kind, ChecksumType::Sha256);
    }

    #[test]
    fn files_without_digests_are_refused() {
        for text in ["", "\n# nothing\n", "<html>not found</html>\n"] {
            let err = digest_for(text, URL, None, IMAGE).unwrap_err();
            assert!(
                matches!(err, ChecksumFileError::Empty { .. }),
                "{text:?}: {err:?}"
            );
        }
        let err = digest_for("abc  disk.img\n", URL, None, IMAGE).unwrap_err();
        assert!(
            matches!(err, ChecksumFileError::WrongAlgorithm { .. }),
            "{err:?}"
        );
    }
}
