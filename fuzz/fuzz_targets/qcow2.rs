//! The agent's qcow2 reader over any bytes: the header, the L1/L2 tables and compressed clusters.
//! Images whose virtual size is small are read whole, as a deployment would; for large ones, the
//! clusters the L1 table names are read.
#![no_main]

use capstan_agent::qcow2::Qcow2;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(image) = Qcow2::parse(data) else {
        return;
    };
    let _ = image.cluster_size();
    if image.virtual_size() <= 16 << 20 {
        let mut total = 0u64;
        let _ = image.for_each_cluster(|_, bytes| {
            total += bytes.len() as u64;
            Ok(())
        });
    } else {
        for index in [0, 1, 7, 511, 4096, u64::MAX / 2, u64::MAX] {
            let _ = image.cluster(index);
        }
    }
});
