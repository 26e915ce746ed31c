//! [`FsStorage`]: the real file system. The only module of this crate that touches `std::fs`.

use crate::storage::{Storage, StorageError, StorageErrorKind};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A queue directory on the real file system.
#[derive(Debug)]
pub struct FsStorage {
    dir: PathBuf,
    open: BTreeMap<String, File>,
    poisoned: BTreeSet<String>,
}

impl FsStorage {
    /// Uses an existing directory.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, StorageError> {
        let dir = dir.as_ref().to_path_buf();
        let meta = std::fs::metadata(&dir).map_err(|e| err("open", "", e))?;
        if !meta.is_dir() {
            return Err(StorageError {
                op: "open",
                file: String::new(),
                kind: StorageErrorKind::Other(format!("{} is not a directory", dir.display())),
            });
        }
        Ok(FsStorage {
            dir,
            open: BTreeMap::new(),
            poisoned: BTreeSet::new(),
        })
    }

    /// Creates the directory (and its parents) if needed, then uses it.
    pub fn create_dir(dir: impl AsRef<Path>) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir.as_ref()).map_err(|e| err("create directory", "", e))?;
        Self::open(dir)
    }

    /// The directory this storage works in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> Result<PathBuf, StorageError> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(StorageError {
                op: "resolve",
                file: name.to_owned(),
                kind: StorageErrorKind::Other("invalid file name".into()),
            });
        }
        Ok(self.dir.join(name))
    }

    fn check(&self, op: &'static str, name: &str) -> Result<(), StorageError> {
        if self.poisoned.contains(name) {
            return Err(StorageError {
                op,
                file: name.to_owned(),
                kind: StorageErrorKind::Poisoned,
            });
        }
        Ok(())
    }

    fn handle(&mut self, op: &'static str, name: &str) -> Result<&mut File, StorageError> {
        self.check(op, name)?;
        if !self.open.contains_key(name) {
            let path = self.path(name)?;
            let f = OpenOptions::new()
                .read(true)
                .append(true)
                .open(path)
                .map_err(|e| err(op, name, e))?;
            self.open.insert(name.to_owned(), f);
        }
        // Inserted just above when absent.
        self.open.get_mut(name).ok_or_else(|| StorageError {
            op,
            file: name.to_owned(),
            kind: StorageErrorKind::NotFound,
        })
    }
}

impl Storage for FsStorage {
    fn list(&self) -> Result<Vec<String>, StorageError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(|e| err("list", "", e))? {
            let entry = entry.map_err(|e| err("list", "", e))?;
            if let Ok(name) = entry.file_name().into_string() {
                out.push(name);
            }
        }
        Ok(out)
    }

    fn create(&mut self, name: &str) -> Result<(), StorageError> {
        let path = self.path(name)?;
        let f = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(path)
            .map_err(|e| err("create", name, e))?;
        self.poisoned.remove(name);
        self.open.insert(name.to_owned(), f);
        Ok(())
    }

    fn append(&mut self, name: &str, data: &[u8]) -> Result<(), StorageError> {
        let f = self.handle("append", name)?;
        f.write_all(data).map_err(|e| err("append", name, e))
    }

    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let opened;
        let f = match self.open.get(name) {
            Some(f) => f,
            None => {
                opened = File::open(self.path(name)?).map_err(|e| err("read", name, e))?;
                &opened
            }
        };
        let mut done = 0;
        while done < buf.len() {
            match f.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(err("read", name, e)),
            }
        }
        Ok(done)
    }

    fn size(&self, name: &str) -> Result<u64, StorageError> {
        let path = self.path(name)?;
        Ok(std::fs::metadata(path)
            .map_err(|e| err("stat", name, e))?
            .len())
    }

    fn sync(&mut self, name: &str) -> Result<(), StorageError> {
        let f = self.handle("sync", name)?;
        if let Err(e) = f.sync_data() {
            // fsyncgate: after a failed fsync the page cache may have dropped the data; never
            // trust (or retry on) this file again.
            self.poisoned.insert(name.to_owned());
            self.open.remove(name);
            return Err(err("sync", name, e));
        }
        Ok(())
    }

    fn sync_dir(&mut self) -> Result<(), StorageError> {
        let d = File::open(&self.dir).map_err(|e| err("sync directory", "", e))?;
        d.sync_all().map_err(|e| err("sync directory", "", e))
    }

    fn remove(&mut self, name: &str) -> Result<(), StorageError> {
        let path = self.path(name)?;
        self.open.remove(name);
        self.poisoned.remove(name);
        std::fs::remove_file(path).map_err(|e| err("remove", name, e))
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), StorageError> {
        let (a, b) = (self.path(from)?, self.path(to)?);
        self.open.remove(from);
        self.open.remove(to);
        std::fs::rename(a, b).map_err(|e| err("rename", from, e))
    }

    fn truncate(&mut self, name: &str, len: u64) -> Result<(), StorageError> {
        let f = self.handle("truncate", name)?;
        f.set_len(len).map_err(|e| err("truncate", name, e))
    }
}

fn err(op: &'static str, file: &str, e: io::Error) -> StorageError {
    let kind = match (e.kind(), e.raw_os_error()) {
        // ENOSPC and EDQUOT on Linux.
        (_, Some(28)) | (_, Some(122)) => StorageErrorKind::NoSpace,
        (io::ErrorKind::NotFound, _) => StorageErrorKind::NotFound,
        (io::ErrorKind::AlreadyExists, _) => StorageErrorKind::AlreadyExists,
        _ => StorageErrorKind::Other(e.to_string()),
    };
    StorageError {
        op,
        file: file.to_owned(),
        kind,
    }
}
