//! A `newc` cpio archive writer: the format the Linux kernel unpacks as an initramfs.

use std::io::Write;

/// One archive being written. Entries need parents first; [`Cpio::finish`] writes the trailer.
pub struct Cpio<W: Write> {
    out: W,
    inode: u32,
}

impl<W: Write> Cpio<W> {
    pub fn new(out: W) -> Self {
        Self { out, inode: 1 }
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) -> std::io::Result<()> {
        let name_len = name.len() + 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.inode,
            mode,
            0,
            0,
            1,
            // Fixed times: the same inputs give the same archive.
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name_len,
            0
        );
        self.inode += 1;
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        let pad = |n: usize| (4 - n % 4) % 4;
        self.out.write_all(&[0u8; 3][..pad(110 + name_len)])?;
        self.out.write_all(data)?;
        self.out.write_all(&[0u8; 3][..pad(data.len())])?;
        Ok(())
    }

    pub fn dir(&mut self, name: &str) -> std::io::Result<()> {
        self.entry(name, 0o040_755, &[])
    }

    pub fn file(&mut self, name: &str, data: &[u8], executable: bool) -> std::io::Result<()> {
        self.entry(name, if executable { 0o100_755 } else { 0o100_644 }, data)
    }

    pub fn symlink(&mut self, name: &str, target: &str) -> std::io::Result<()> {
        self.entry(name, 0o120_777, target.as_bytes())
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.entry("TRAILER!!!", 0, &[])?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn cpio_lists_what_was_written() {
        let mut archive = Cpio::new(Vec::new());
        archive.dir("bin").unwrap();
        archive
            .file("bin/hello", b"#!/bin/sh\necho hi\n", true)
            .unwrap();
        archive.symlink("bin/sh", "busybox").unwrap();
        let bytes = archive.finish().unwrap();
        let mut child = Command::new("cpio")
            .args(["-t", "-v", "--quiet"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), &bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success());
        assert!(
            listing.contains("bin/hello") && listing.contains("bin/sh -> busybox"),
            "{listing}"
        );
    }
}
