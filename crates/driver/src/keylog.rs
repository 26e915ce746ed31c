//! `sslkeylogfile` (libpq 18): each TLS secret appended to a file in the NSS key log format
//! (`LABEL <client random in hex> <secret in hex>`), as Wireshark reads it. Like libpq, the
//! file is opened for each line (created with mode 0600), and a file that cannot be opened
//! costs a warning on standard error for that line, never the connection: it is a debugging
//! aid, and the secrets it holds decrypt the session, so it is written only when asked for.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Where the secrets go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyLogFile(PathBuf);

impl KeyLogFile {
    /// `sslkeylogfile`'s path; an empty value asks for nothing.
    pub(crate) fn new(path: &[u8]) -> Option<KeyLogFile> {
        (!path.is_empty())
            .then(|| KeyLogFile(PathBuf::from(String::from_utf8_lossy(path).into_owned())))
    }

    /// Appends one secret; on failure, libpq's warning on standard error.
    pub(crate) fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        if let Err(text) = append(&self.0, &line(label, client_random, secret)) {
            eprintln!("{text}");
        }
    }
}

/// The NSS key log line for one secret, newline included.
fn line(label: &str, client_random: &[u8], secret: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(label.len() + 2 * (client_random.len() + secret.len()) + 3);
    out.push_str(label);
    for part in [client_random, secret] {
        out.push(' ');
        for b in part {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
    out.push('\n');
    out
}

/// Appends `text` to `path`, creating it readable by its owner only; the error is libpq's
/// warning.
fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let warn = |e: std::io::Error| {
        format!(
            "WARNING: could not open SSL key logging file \"{}\": {}",
            path.display(),
            crate::net::strerror(&e)
        )
    };
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(warn)?;
    file.write_all(text.as_bytes()).map_err(warn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn appends_nss_lines_to_a_file_only_its_owner_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.log");
        let log = KeyLogFile::new(path.to_str().unwrap().as_bytes()).unwrap();
        log.log("CLIENT_RANDOM", &[0x00, 0xab], &[0xff, 0x10, 0x0f]);
        log.log("EXPORTER_SECRET", &[1], &[2]);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "CLIENT_RANDOM 00ab ff100f\nEXPORTER_SECRET 01 02\n"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(KeyLogFile::new(b""), None);
    }

    #[test]
    fn a_file_that_cannot_be_opened_is_libpqs_warning() {
        assert_eq!(
            append(Path::new("/nonexistent/dir/k.log"), "x\n"),
            Err(
                "WARNING: could not open SSL key logging file \"/nonexistent/dir/k.log\": \
                 No such file or directory"
                    .to_owned()
            )
        );
    }
}
