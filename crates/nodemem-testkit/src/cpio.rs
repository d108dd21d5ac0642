//! A writer for the `newc` cpio format the kernel unpacks as its initramfs
//! (`Documentation/driver-api/early-userspace/buffer-format.rst`): 110-byte ASCII
//! headers, names and data padded to four bytes, a `TRAILER!!!` entry at the end.
//! Written here so building an initramfs needs no host tool and no root (device nodes
//! are just header fields).

use std::collections::BTreeSet;

pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl Default for Cpio {
    fn default() -> Self {
        Self::new()
    }
}

impl Cpio {
    pub fn new() -> Self {
        Cpio {
            out: Vec::new(),
            ino: 1,
            dirs: BTreeSet::new(),
        }
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let name = name.trim_start_matches('/');
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            if mode & S_IFDIR != 0 { 2 } else { 1 },
            0, // mtime
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // checksum (unused by newc)
        ];
        self.ino += 1;
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    /// Adds a directory and its missing parents.
    pub fn dir(&mut self, path: &str) {
        let mut so_far = String::new();
        for part in path.trim_matches('/').split('/').filter(|p| !p.is_empty()) {
            if !so_far.is_empty() {
                so_far.push('/');
            }
            so_far.push_str(part);
            if self.dirs.insert(so_far.clone()) {
                let name = so_far.clone();
                self.entry(&name, S_IFDIR | 0o755, (0, 0), &[]);
            }
        }
    }

    fn parent(&mut self, path: &str) {
        if let Some((parent, _)) = path.trim_start_matches('/').rsplit_once('/') {
            self.dir(parent);
        }
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.parent(path);
        self.entry(path, S_IFREG | (mode & 0o7777), (0, 0), data);
    }

    pub fn symlink(&mut self, path: &str, target: &str) {
        self.parent(path);
        self.entry(path, S_IFLNK | 0o777, (0, 0), target.as_bytes());
    }

    pub fn char_device(&mut self, path: &str, mode: u32, major: u32, minor: u32) {
        self.parent(path);
        self.entry(path, S_IFCHR | (mode & 0o7777), (major, minor), &[]);
    }

    /// The archive with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(header: &[u8], i: usize) -> u32 {
        let s = std::str::from_utf8(&header[6 + 8 * i..14 + 8 * i]).unwrap();
        u32::from_str_radix(s, 16).unwrap()
    }

    #[test]
    fn newc_layout_is_aligned_and_terminated() {
        let mut c = Cpio::new();
        c.file("/bin/x", 0o755, b"hello");
        let out = c.finish();
        assert_eq!(&out[..6], b"070701");
        // First entry: directory "bin".
        assert_eq!(field(&out, 1), S_IFDIR | 0o755);
        assert_eq!(field(&out, 11), 4); // "bin\0"
        assert_eq!(&out[110..113], b"bin");
        // Every header starts on a four-byte boundary; the file follows the directory.
        let second = (110usize + 4).div_ceil(4) * 4; // header + "bin\0", padded
        assert_eq!(&out[second..second + 6], b"070701");
        assert_eq!(field(&out[second..], 1), S_IFREG | 0o755);
        assert_eq!(field(&out[second..], 6), 5);
        let name_end = second + 110 + 6; // "bin/x\0"
        let data_start = name_end.div_ceil(4) * 4;
        assert_eq!(&out[data_start..data_start + 5], b"hello");
        assert!(out.len().is_multiple_of(4));
        let trailer = out.windows(10).position(|w| w == b"TRAILER!!!").unwrap();
        assert!(trailer > data_start);
    }
}
