//! The agent's state directory: small JSON records written atomically (temporary file,
//! fsync, rename, fsync of the directory), each in a versioned envelope with a
//! checksum, so a torn, truncated or hand-edited record is detected and reported with
//! its path, never half-read and never a crash.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The envelope format version.
pub const STATE_FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Envelope {
    format: u32,
    kind: String,
    checksum: String,
    data: Value,
}

/// Why a state record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The record's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The record is torn or was edited (its checksum or JSON is wrong).
    #[error("{}: corrupt state record ({reason}); move it away to start from an empty record", .path.display())]
    Corrupt {
        /// The record's path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The record is of another format version (a newer or older agent's).
    #[error("{}: state format {found} is not the supported format {STATE_FORMAT}", .path.display())]
    UnsupportedFormat {
        /// The record's path.
        path: PathBuf,
        /// Its format version.
        found: u32,
    },
}

impl StateError {
    /// The record is there but cannot be trusted (torn, edited, another format): the
    /// caller may set it aside and re-derive it. An I/O error is not one of these.
    pub fn is_unusable(&self) -> bool {
        matches!(
            self,
            StateError::Corrupt { .. } | StateError::UnsupportedFormat { .. }
        )
    }
}

/// 64-bit FNV-1a, as 16 hex digits: detects torn and edited records (not an attacker).
fn checksum(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= *b as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Canonical bytes of a JSON value (maps are sorted), what the checksum covers.
fn canonical(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("a JSON value always serializes")
}

/// The agent's state directory: records saved atomically, versioned and checksummed.
#[derive(Clone, Debug)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Opens (creating, mode 0700) the directory.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StateError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|source| StateError::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(StateDir { dir })
    }

    /// Where the record `name` is.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The record `name` of `kind`, None when there is none yet.
    pub fn load<T: DeserializeOwned>(
        &self,
        name: &str,
        kind: &str,
    ) -> Result<Option<T>, StateError> {
        let path = self.path(name);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StateError::Io { path, source }),
        };
        let corrupt = |reason: String| StateError::Corrupt {
            path: path.clone(),
            reason,
        };
        let envelope: Envelope = serde_json::from_slice(&bytes)
            .map_err(|e| corrupt(format!("not a state envelope: {e}")))?;
        if envelope.format != STATE_FORMAT {
            return Err(StateError::UnsupportedFormat {
                path,
                found: envelope.format,
            });
        }
        if envelope.kind != kind {
            return Err(corrupt(format!(
                "holds a {:?} record, expected {kind:?}",
                envelope.kind
            )));
        }
        let sum = checksum(&canonical(&envelope.data));
        if sum != envelope.checksum {
            return Err(corrupt(format!(
                "checksum {sum} does not match the recorded {}",
                envelope.checksum
            )));
        }
        serde_json::from_value(envelope.data)
            .map(Some)
            .map_err(|e| corrupt(format!("unexpected content: {e}")))
    }

    /// Replaces the record atomically.
    pub fn save<T: Serialize>(&self, name: &str, kind: &str, data: &T) -> Result<(), StateError> {
        let path = self.path(name);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StateError::Io { path, source }
        };
        let data = serde_json::to_value(data).expect("state records always serialize");
        let envelope = Envelope {
            format: STATE_FORMAT,
            kind: kind.to_string(),
            checksum: checksum(&canonical(&data)),
            data,
        };
        let mut bytes = serde_json::to_vec_pretty(&envelope).expect("an envelope serializes");
        bytes.push(b'\n');
        write_atomically(&path, &bytes, 0o600).map_err(io(&path))
    }

    /// Moves an unusable record aside (kept for a post-mortem, beside the directory's
    /// records under a name no record has) and returns where it went.
    pub fn set_aside(&self, name: &str, at_unix_seconds: u64) -> Result<PathBuf, StateError> {
        let from = self.path(name);
        let to = self.path(&format!("{name}.unusable-{at_unix_seconds}"));
        fs::rename(&from, &to).map_err(|source| StateError::Io {
            path: from.clone(),
            source,
        })?;
        Ok(to)
    }

    /// Removes a record (absent is fine).
    pub fn remove(&self, name: &str) -> Result<(), StateError> {
        match fs::remove_file(self.path(name)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Io {
                path: self.path(name),
                source,
            }),
        }
    }
}

/// Replaces `path` with `bytes` atomically and durably: a temporary file beside it,
/// fsync, rename, fsync of the directory. A reader sees the old file or the new one;
/// a write that fails (a full or read-only file system) leaves the old one and no
/// temporary file.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    let written = write_then_rename(&tmp, path, bytes, mode);
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    // The rename is durable once the directory is.
    File::open(dir).and_then(|d| d.sync_all())
}

fn write_then_rename(tmp: &Path, path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn record() -> BTreeMap<String, String> {
        BTreeMap::from([("kubepods/a".to_string(), "0".to_string())])
    }

    #[test]
    fn round_trip_and_absence() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path().join("state")).unwrap();
        assert_eq!(
            state
                .load::<BTreeMap<String, String>>("o.json", "ownership")
                .unwrap(),
            None
        );
        state.save("o.json", "ownership", &record()).unwrap();
        assert_eq!(state.load("o.json", "ownership").unwrap(), Some(record()));
        assert!(
            !state.path(".o.json.tmp").exists(),
            "no temporary file left"
        );
    }

    #[test]
    fn truncated_edited_foreign_and_future_records_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        state.save("o.json", "ownership", &record()).unwrap();
        let good = fs::read_to_string(state.path("o.json")).unwrap();
        let load = |text: &str| {
            fs::write(state.path("o.json"), text).unwrap();
            state
                .load::<BTreeMap<String, String>>("o.json", "ownership")
                .unwrap_err()
                .to_string()
        };
        let truncated = load(&good[..good.len() / 2]);
        assert!(
            truncated.contains("corrupt state record (not a state envelope: EOF while parsing"),
            "{truncated}"
        );
        assert!(
            truncated.ends_with("move it away to start from an empty record"),
            "{truncated}"
        );
        let edited = load(&good.replace("\"0\"", "\"1\""));
        assert!(
            edited.contains("corrupt state record (checksum "),
            "{edited}"
        );
        let foreign = load(&good.replace("\"ownership\"", "\"memory-manager\""));
        assert!(
            foreign.contains("holds a \"memory-manager\" record, expected \"ownership\""),
            "{foreign}"
        );
        let future = load(&good.replace("\"format\": 1", "\"format\": 2"));
        assert!(
            future.ends_with("state format 2 is not the supported format 1"),
            "{future}"
        );
        let empty = load("");
        assert!(empty.contains("corrupt state record"), "{empty}");
    }

    #[test]
    fn an_unusable_record_is_set_aside_and_an_io_error_is_not_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        std::fs::write(state.path("r.json"), "{\"format\": 1, \"kin").unwrap();
        let e = state.load::<Value>("r.json", "r").unwrap_err();
        assert!(e.is_unusable(), "{e}");
        let aside = state.set_aside("r.json", 1234).unwrap();
        assert_eq!(aside, state.path("r.json.unusable-1234"));
        assert_eq!(
            std::fs::read_to_string(&aside).unwrap(),
            "{\"format\": 1, \"kin"
        );
        assert!(state.load::<Value>("r.json", "r").unwrap().is_none());
        // A record that cannot be read at all (a directory in its place) is an I/O
        // error: not set aside, reported.
        std::fs::create_dir(state.path("d.json")).unwrap();
        let e = state.load::<Value>("d.json", "d").unwrap_err();
        assert!(!e.is_unusable(), "{e}");
        assert!(matches!(
            state.set_aside("missing.json", 1),
            Err(StateError::Io { .. })
        ));
    }
}
