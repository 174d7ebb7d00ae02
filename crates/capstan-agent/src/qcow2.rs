//! A qcow2 reader: turns an image held in memory into the raw bytes of the disk it describes,
//! cluster by cluster, as it is written. Versions 2 and 3, uncompressed and deflate-compressed
//! clusters; backing files, encryption and other compression types are refused.

use flate2::read::DeflateDecoder;
use std::io::Read;

/// Why an image cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Qcow2Error {
    #[error("not a qcow2 image (no QFI magic)")]
    NotQcow2,
    #[error("qcow2 {0}")]
    Unsupported(String),
    #[error("qcow2 image is truncated or corrupt: {0}")]
    Corrupt(String),
}

/// A parsed qcow2 image.
pub struct Qcow2<'a> {
    data: &'a [u8],
    cluster_bits: u32,
    size: u64,
    l1: Vec<u64>,
}

fn be32(d: &[u8], at: usize) -> Result<u32, Qcow2Error> {
    // An offset from the image itself may be anywhere: past the end is corruption, not overflow.
    at.checked_add(4)
        .and_then(|end| d.get(at..end))
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| Qcow2Error::Corrupt(format!("header field at {at}")))
}

fn be64(d: &[u8], at: usize) -> Result<u64, Qcow2Error> {
    let low = at
        .checked_add(4)
        .ok_or_else(|| Qcow2Error::Corrupt(format!("header field at {at}")))?;
    Ok((u64::from(be32(d, at)?) << 32) | u64::from(be32(d, low)?))
}

const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
const COMPRESSED: u64 = 1 << 62;
const ZERO_FLAG: u64 = 1;

impl<'a> Qcow2<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self, Qcow2Error> {
        if data.get(0..4) != Some(b"QFI\xfb") {
            return Err(Qcow2Error::NotQcow2);
        }
        let version = be32(data, 4)?;
        if !(2..=3).contains(&version) {
            return Err(Qcow2Error::Unsupported(format!("version {version}")));
        }
        if be64(data, 8)? != 0 {
            return Err(Qcow2Error::Unsupported("images with a backing file".into()));
        }
        let cluster_bits = be32(data, 20)?;
        if !(9..=21).contains(&cluster_bits) {
            return Err(Qcow2Error::Corrupt(format!("cluster_bits {cluster_bits}")));
        }
        let size = be64(data, 24)?;
        if be32(data, 32)? != 0 {
            return Err(Qcow2Error::Unsupported("encrypted images".into()));
        }
        if version == 3 {
            let incompatible = be64(data, 72)?;
            // Bit 3 is "compression type in header"; anything but zlib (0) is refused below.
            if incompatible & !0b1000 != 0 {
                return Err(Qcow2Error::Unsupported(format!(
                    "incompatible features {incompatible:#x}"
                )));
            }
            let header_length = be32(data, 100)?;
            if incompatible & 0b1000 != 0
                && header_length > 104
                && data.get(104).copied().unwrap_or(0) != 0
            {
                return Err(Qcow2Error::Unsupported(
                    "compression other than zlib".into(),
                ));
            }
        }
        let l1_size = be32(data, 36)? as usize;
        let l1_offset = usize::try_from(be64(data, 40)?)
            .map_err(|_| Qcow2Error::Corrupt("L1 offset".into()))?;
        let l1 = (0..l1_size)
            .map(|i| be64(data, l1_offset + 8 * i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            data,
            cluster_bits,
            size,
            l1,
        })
    }

    /// The virtual disk's size in bytes.
    pub fn virtual_size(&self) -> u64 {
        self.size
    }

    pub fn cluster_size(&self) -> usize {
        1usize << self.cluster_bits
    }

    fn clusters(&self) -> u64 {
        self.size.div_ceil(self.cluster_size() as u64)
    }

    /// The raw contents of cluster `index`; `None` when it reads as zeros.
    pub fn cluster(&self, index: u64) -> Result<Option<Vec<u8>>, Qcow2Error> {
        let cluster_size = self.cluster_size() as u64;
        let l2_entries = cluster_size / 8;
        let l1_entry = self
            .l1
            .get(usize::try_from(index / l2_entries).unwrap_or(usize::MAX))
            .copied()
            .unwrap_or(0);
        let l2_offset = l1_entry & OFFSET_MASK;
        if l2_offset == 0 {
            return Ok(None);
        }
        let at = usize::try_from(l2_offset + 8 * (index % l2_entries))
            .map_err(|_| Qcow2Error::Corrupt("L2".into()))?;
        let entry = be64(self.data, at)?;
        if entry & COMPRESSED != 0 {
            let x = 62 - (self.cluster_bits - 8);
            let offset = entry & ((1u64 << x) - 1);
            let sectors = ((entry >> x) & ((1u64 << (self.cluster_bits - 8)) - 1)) + 1;
            let length = sectors * 512 - (offset & 511);
            let start =
                usize::try_from(offset).map_err(|_| Qcow2Error::Corrupt("offset".into()))?;
            let end = (start + usize::try_from(length).unwrap_or(0)).min(self.data.len());
            let mut out = Vec::with_capacity(cluster_size as usize);
            DeflateDecoder::new(&self.data[start.min(end)..end])
                .take(cluster_size)
                .read_to_end(&mut out)
                .map_err(|e| Qcow2Error::Corrupt(format!("compressed cluster {index}: {e}")))?;
            out.resize(cluster_size as usize, 0);
            return Ok(Some(out));
        }
        let offset = entry & OFFSET_MASK;
        if offset == 0 || entry & ZERO_FLAG != 0 {
            return Ok(None);
        }
        let start = usize::try_from(offset).map_err(|_| Qcow2Error::Corrupt("offset".into()))?;
        let slice = self
            .data
            .get(start..start + cluster_size as usize)
            .ok_or_else(|| Qcow2Error::Corrupt(format!("cluster {index} beyond the file")))?;
        Ok(Some(slice.to_vec()))
    }

    /// Calls `sink(offset, bytes)` for every cluster of the disk in order, zeros included.
    pub fn for_each_cluster(
        &self,
        mut sink: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let cluster_size = self.cluster_size() as u64;
        let zeros = vec![0u8; cluster_size as usize];
        for index in 0..self.clusters() {
            let offset = index * cluster_size;
            let len = usize::try_from(cluster_size.min(self.size - offset)).unwrap_or(0);
            match self.cluster(index)? {
                Some(data) => sink(offset, &data[..len])?,
                None => sink(offset, &zeros[..len])?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `qcow2` fuzz target: a table offset near the end of the address space made
    /// the field reader's bounds overflow (a panic in debug builds).
    #[test]
    fn an_offset_at_the_end_of_the_address_space_is_corruption() {
        let data = [0u8; 16];
        assert!(be32(&data, usize::MAX - 1).is_err());
        assert!(be64(&data, usize::MAX - 5).is_err());
    }
    use std::process::Command;

    #[test]
    fn qemu_img_images_read_back_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("disk.raw");
        // Some data, some zeros, an odd tail: 3 MiB + 1 KiB.
        let mut data = vec![0u8; 3 * 1024 * 1024 + 1024];
        for (i, b) in data.iter_mut().enumerate().take(1_500_000) {
            *b = u8::try_from((i * 7 + i / 4096) % 251).unwrap();
        }
        data[3 * 1024 * 1024 + 100] = 9;
        std::fs::write(&raw, &data).unwrap();
        for extra in [&[][..], &["-c"][..], &["-o", "compat=0.10"][..]] {
            let qcow = dir.path().join("disk.qcow2");
            let status = Command::new("qemu-img")
                .args(["convert", "-f", "raw", "-O", "qcow2"])
                .args(extra)
                .arg(&raw)
                .arg(&qcow)
                .status()
                .unwrap();
            assert!(status.success());
            let bytes = std::fs::read(&qcow).unwrap();
            let image = Qcow2::parse(&bytes).unwrap();
            assert_eq!(image.virtual_size(), data.len() as u64);
            let mut out = vec![0u8; data.len()];
            image
                .for_each_cluster(|offset, chunk| {
                    let at = usize::try_from(offset).unwrap();
                    out[at..at + chunk.len()].copy_from_slice(chunk);
                    Ok(())
                })
                .unwrap();
            assert!(out == data, "{extra:?}: converted bytes differ");
        }
    }

    #[test]
    fn other_files_and_backing_files_are_refused() {
        assert!(matches!(
            Qcow2::parse(b"not an image at all"),
            Err(Qcow2Error::NotQcow2)
        ));
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.qcow2");
        let top = dir.path().join("top.qcow2");
        assert!(
            Command::new("qemu-img")
                .args(["create", "-q", "-f", "qcow2"])
                .arg(&base)
                .arg("1M")
                .status()
                .unwrap()
                .success()
        );
        assert!(
            Command::new("qemu-img")
                .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
                .arg(&base)
                .arg(&top)
                .status()
                .unwrap()
                .success()
        );
        let bytes = std::fs::read(&top).unwrap();
        let err = Qcow2::parse(&bytes).err().unwrap().to_string();
        assert!(err.contains("backing file"), "{err}");
    }
}
