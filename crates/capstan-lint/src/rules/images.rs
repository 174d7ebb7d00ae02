//! OS image checksums of BareMetalHosts (`spec.image`) and Metal3MachineTemplates
//! (`spec.template.spec.image`): a checksum must be present (except for `live-iso` images) and, when
//! it is a digest rather than a URL, be hex of the length its checksumType implies (md5 32, sha256 64,
//! sha512 128; any of these when the type is unset or `auto`).

use capstan_model::path::FieldPath;

use super::Ctx;
use crate::catalogue::id;
use crate::diagnostic::Diagnostic;
use crate::index::{Entry, M3MT_SPEC_PATH, View};

/// The parts of an image lint checks, from either image type.
struct ImageFields<'v> {
    url: &'v str,
    checksum: Option<&'v str>,
    checksum_type: Option<&'v str>,
    format: Option<&'v str>,
}

fn check_image(
    entry: &Entry<'_>,
    image: &ImageFields<'_>,
    base: &FieldPath,
    out: &mut Vec<Diagnostic>,
) {
    if image.url.is_empty() {
        return;
    }
    let checksum = image.checksum.map(str::trim).filter(|c| !c.is_empty());
    let Some(checksum) = checksum else {
        if image.format != Some("live-iso") {
            out.push(
                Diagnostic::new(
                    id::IMAGE_CHECKSUM_MISSING,
                    format!("image {} has no checksum", image.url),
                    entry.at(&base.key("checksum")),
                )
                .why("Metal3 requires a checksum for disk images; the host stays in provisioning")
                .hint("set `checksum` (a hex digest or the URL of a checksum file) and `checksumType`"),
            );
        }
        return;
    };
    if checksum.contains("://") {
        return;
    }
    let kind = image
        .checksum_type
        .map(str::trim)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let expected: &[usize] = match kind.as_str() {
        "md5" => &[32],
        "sha256" => &[64],
        "sha512" => &[128],
        "" | "auto" => &[32, 64, 128],
        other => {
            out.push(
                Diagnostic::new(
                    id::IMAGE_CHECKSUM_LENGTH,
                    format!("checksumType `{other}` is not md5, sha256, sha512 or auto"),
                    entry.at(&base.key("checksumType")),
                )
                .why("Ironic cannot verify the image with an unknown digest type")
                .hint("set checksumType to md5, sha256 or sha512"),
            );
            return;
        }
    };
    let hex = checksum.chars().all(|c| c.is_ascii_hexdigit());
    if hex && expected.contains(&checksum.len()) {
        return;
    }
    let label = if kind.is_empty() {
        "auto".to_owned()
    } else {
        kind
    };
    let lengths: Vec<String> = expected.iter().map(ToString::to_string).collect();
    let problem = if hex {
        format!("{} hex characters", checksum.len())
    } else {
        "characters that are not hex".to_owned()
    };
    out.push(
        Diagnostic::new(
            id::IMAGE_CHECKSUM_LENGTH,
            format!("checksum of {} has {problem}; a {label} digest has {}", image.url, lengths.join(" or ")),
            entry.at(&base.key("checksum")),
        )
        .why("the downloaded image never matches the checksum, so provisioning fails after the image was written")
        .hint("paste the full hex digest and set checksumType to its algorithm, or give the URL of the checksum file"),
    );
}

/// Runs the image rules.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for entry in &ctx.index.entries {
        match &entry.view {
            View::Host(host) => {
                if let Some(image) = &host.spec.image {
                    let fields = ImageFields {
                        url: &image.url,
                        checksum: image.checksum.as_deref(),
                        checksum_type: image.checksum_type.as_deref(),
                        format: image.format.as_deref(),
                    };
                    check_image(entry, &fields, &FieldPath::parse("spec.image"), out);
                }
            }
            View::MachineTemplate(spec) => {
                if let Some(image) = &spec.image {
                    let fields = ImageFields {
                        url: &image.url,
                        checksum: image.checksum.as_deref(),
                        checksum_type: image.checksum_type.as_deref(),
                        format: image.any_format(),
                    };
                    check_image(
                        entry,
                        &fields,
                        &FieldPath::parse(M3MT_SPEC_PATH).key("image"),
                        out,
                    );
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{BASE, has_rule, lint_text};

    const SHA256: &str =
        "checksum: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn checksum_lengths() {
        assert!(BASE.contains(SHA256));
        let md5_labelled = BASE.replacen("checksumType: sha256", "checksumType: md5", 1);
        assert!(has_rule(
            &lint_text(&md5_labelled),
            id::IMAGE_CHECKSUM_LENGTH
        ));
        let truncated = BASE.replacen(SHA256, "checksum: 9f86d081884c7d659a2feaa0c55ad015", 1);
        assert!(has_rule(&lint_text(&truncated), id::IMAGE_CHECKSUM_LENGTH));
        let url = BASE.replacen(SHA256, "checksum: http://images/fedora.raw.sha256sum", 1);
        assert!(!has_rule(&lint_text(&url), id::IMAGE_CHECKSUM_LENGTH));
        assert!(!has_rule(&lint_text(BASE), id::IMAGE_CHECKSUM_LENGTH));
    }

    #[test]
    fn missing_checksums() {
        let missing = BASE.replacen(&format!("        {SHA256}\n"), "", 1);
        assert_ne!(missing, BASE);
        assert!(has_rule(&lint_text(&missing), id::IMAGE_CHECKSUM_MISSING));
        let live = missing.replacen("format: raw", "format: live-iso", 1);
        assert!(!has_rule(&lint_text(&live), id::IMAGE_CHECKSUM_MISSING));
    }
}
