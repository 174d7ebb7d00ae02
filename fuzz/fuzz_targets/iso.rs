//! The ISO 9660 + Joliet writer with names and contents a user's data could give it (config drive
//! paths come from Metal3 data): whatever is accepted must produce a whole image of 2 KiB sectors
//! with the primary volume descriptor where readers look for it.
#![no_main]

use arbitrary::Arbitrary;
use capstan_iso::IsoImage;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    volume_id: String,
    files: Vec<(String, Vec<u8>)>,
    boot: Option<(String, String)>,
}

fuzz_target!(|input: Input| {
    let Ok(mut image) = IsoImage::new(&input.volume_id) else {
        return;
    };
    for (path, data) in input.files.into_iter().take(64) {
        let _ = image.add_bytes(&path, data);
    }
    if let Some((boot, catalog)) = &input.boot {
        let _ = image.isolinux_boot(boot, catalog);
    }
    if let Ok(bytes) = image.to_vec() {
        assert_eq!(bytes.len() % 2048, 0, "whole sectors");
        assert_eq!(
            &bytes[16 * 2048 + 1..16 * 2048 + 6],
            b"CD001",
            "the primary volume descriptor"
        );
    }
});
