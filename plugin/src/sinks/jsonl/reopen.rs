//! A file appended to that follows log rotation. logrotate's default `create` mode renames
//! the file (and maybe compresses it) and leaves a new one at the path: a file opened once
//! would keep writing to the renamed or deleted inode, where no reader looks. Its
//! `copytruncate` mode empties the file in place instead, which appending handles.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the path is compared with the open file at most: one `stat` a second costs
/// nothing, and reports written to the old file meanwhile are not lost (they are in the
/// rotated file, which logrotate's `delaycompress` leaves alone until the next rotation).
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The file at a path, reopened when the path stops naming it.
pub(super) struct ReopeningFile {
    path: PathBuf,
    file: File,
    /// (device, inode) of `file`: what the path must still name.
    id: (u64, u64),
    every: Duration,
    checked: Instant,
}

impl ReopeningFile {
    /// Opens (creates) `path` for appending; it is checked for rotation at most once per
    /// `every`.
    pub(super) fn open(path: &Path, every: Duration) -> io::Result<Self> {
        let (file, id) = open_append(path)?;
        Ok(Self {
            path: path.to_owned(),
            file,
            id,
            every,
            checked: Instant::now(),
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Call between lines (a line never straddles two files). When the check is due and
    /// the path names another file or none, opens (creates) it; `Ok(true)` when it did. On
    /// an error the old file is kept, and the next check tries again.
    pub(super) fn follow_rotation(&mut self) -> io::Result<bool> {
        if self.checked.elapsed() < self.every {
            return Ok(false);
        }
        self.checked = Instant::now();
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.id => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let (file, id) = open_append(&self.path)?;
        self.file = file;
        self.id = id;
        Ok(true)
    }
}

impl Write for ReopeningFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// `path` opened for appending, with its (device, inode).
fn open_append(path: &Path) -> io::Result<(File, (u64, u64))> {
    // O_APPEND: each write lands at the current end, so after `copytruncate` empties the
    // file the next line starts at 0 instead of after a hole of NULs. Unbuffered: each
    // report is one write of a whole line; a buffer would split long lines across writes.
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let m = file.metadata()?;
    Ok((file, (m.dev(), m.ino())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_checked_at_most_once_per_interval() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("r.jsonl");
        let rotated = dir.path().join("r.jsonl.1");
        let mut f = ReopeningFile::open(&path, Duration::from_secs(3600)).expect("opens");
        std::fs::rename(&path, &rotated).expect("renamed");
        // Not due yet: still the old file, and no new one created.
        assert!(!f.follow_rotation().expect("no error"));
        f.write_all(b"x\n").expect("written");
        assert_eq!(std::fs::read(&rotated).expect("readable"), b"x\n");
        assert!(!path.exists());
        // Due: the renamed file is noticed.
        f.every = Duration::ZERO;
        assert!(f.follow_rotation().expect("reopened"));
        f.write_all(b"y\n").expect("written");
        assert_eq!(std::fs::read(&path).expect("readable"), b"y\n");
        // Same file at the path: nothing to do.
        assert!(!f.follow_rotation().expect("no error"));
    }
}
