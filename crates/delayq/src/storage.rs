//! The storage trait every byte of the queue goes through.

use std::fmt;

/// Why a storage operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageErrorKind {
    /// The device or quota is full (ENOSPC, EDQUOT). Retryable once space is freed.
    NoSpace,
    /// The file does not exist.
    NotFound,
    /// The file already exists.
    AlreadyExists,
    /// An earlier fsync of this file failed; it is never trusted again.
    Poisoned,
    /// Any other failure, with the operating system's text.
    Other(String),
}

/// A failed storage operation: what was attempted, on which file, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageError {
    /// The operation (`append`, `sync`, ...).
    pub op: &'static str,
    /// The file name inside the queue directory (empty for directory operations).
    pub file: String,
    /// The cause.
    pub kind: StorageErrorKind,
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match &self.kind {
            StorageErrorKind::NoSpace => "no space left on device".to_owned(),
            StorageErrorKind::NotFound => "no such file".to_owned(),
            StorageErrorKind::AlreadyExists => "file exists".to_owned(),
            StorageErrorKind::Poisoned => "file is poisoned by an earlier fsync failure".to_owned(),
            StorageErrorKind::Other(s) => s.clone(),
        };
        if self.file.is_empty() {
            write!(f, "{} of the queue directory failed: {why}", self.op)
        } else {
            write!(f, "{} of \"{}\" failed: {why}", self.op, self.file)
        }
    }
}

impl std::error::Error for StorageError {}

/// A flat directory of files, addressed by name. All queue I/O goes through this trait.
///
/// Durability model: data appended to a file is durable only after [`Storage::sync`] of that
/// file; creating, removing or renaming a file is durable only after [`Storage::sync_dir`].
pub trait Storage {
    /// Names of all files in the directory, in any order.
    fn list(&self) -> Result<Vec<String>, StorageError>;
    /// Creates a new empty file; fails if it exists.
    fn create(&mut self, name: &str) -> Result<(), StorageError>;
    /// Appends bytes at the end of the file. On error, any prefix of `data` may have been written.
    fn append(&mut self, name: &str, data: &[u8]) -> Result<(), StorageError>;
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (short only at EOF).
    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError>;
    /// Replaces `out`'s contents with up to `len` bytes at `offset` (fewer only at EOF) and
    /// returns how many. The default reads through [`Storage::read`], zeroing only what `out`
    /// grows by; an in-memory disk copies its bytes in without zeroing them first.
    fn read_into(
        &self,
        name: &str,
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, StorageError> {
        if out.len() < len {
            out.resize(len, 0);
        } else {
            out.truncate(len);
        }
        let n = self.read(name, offset, out)?;
        out.truncate(n);
        Ok(n)
    }
    /// The whole file, borrowed, where the storage already holds it in memory (`None`: read
    /// it with [`Storage::read_into`]). Recovery scans every segment at every start, and an
    /// in-memory disk would otherwise copy each one into a window first.
    fn contents(&self, _name: &str) -> Option<&[u8]> {
        None
    }
    /// Current length of the file.
    fn size(&self, name: &str) -> Result<u64, StorageError>;
    /// Makes the file's data durable (fdatasync). A failure poisons the file.
    fn sync(&mut self, name: &str) -> Result<(), StorageError>;
    /// Makes creations, removals and renames durable (fsync of the directory).
    fn sync_dir(&mut self) -> Result<(), StorageError>;
    /// Removes a file.
    fn remove(&mut self, name: &str) -> Result<(), StorageError>;
    /// Renames a file, replacing `to` if it exists.
    fn rename(&mut self, from: &str, to: &str) -> Result<(), StorageError>;
    /// Cuts the file to `len` bytes.
    fn truncate(&mut self, name: &str, len: u64) -> Result<(), StorageError>;
}

impl<S: Storage + ?Sized> Storage for &mut S {
    fn list(&self) -> Result<Vec<String>, StorageError> {
        (**self).list()
    }
    fn create(&mut self, name: &str) -> Result<(), StorageError> {
        (**self).create(name)
    }
    fn append(&mut self, name: &str, data: &[u8]) -> Result<(), StorageError> {
        (**self).append(name, data)
    }
    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        (**self).read(name, offset, buf)
    }
    fn read_into(
        &self,
        name: &str,
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, StorageError> {
        (**self).read_into(name, offset, len, out)
    }
    fn contents(&self, name: &str) -> Option<&[u8]> {
        (**self).contents(name)
    }
    fn size(&self, name: &str) -> Result<u64, StorageError> {
        (**self).size(name)
    }
    fn sync(&mut self, name: &str) -> Result<(), StorageError> {
        (**self).sync(name)
    }
    fn sync_dir(&mut self) -> Result<(), StorageError> {
        (**self).sync_dir()
    }
    fn remove(&mut self, name: &str) -> Result<(), StorageError> {
        (**self).remove(name)
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), StorageError> {
        (**self).rename(from, to)
    }
    fn truncate(&mut self, name: &str, len: u64) -> Result<(), StorageError> {
        (**self).truncate(name, len)
    }
}
