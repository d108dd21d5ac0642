//! Relative cgroup paths that cannot leave the cgroup root.
//!
//! Identifiers that end up in a path (pod UIDs, container IDs) are checked on their own
//! first ([`check_identifier`]): a UID holding `/` would otherwise stay inside the root
//! but name the wrong cgroup. Every path is then checked component by component
//! ([`CgroupPath::new`]), so nothing built from hostile input reaches the file system.

use std::ffi::OsStr;
use std::fmt;

/// Linux's NAME_MAX: the longest file name a directory entry can have.
pub const NAME_MAX: usize = 255;

/// What is wrong with a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameProblem {
    Empty,
    DotOrDotDot,
    Slash,
    Nul,
    TooLong,
    NotUtf8,
    Absolute,
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameProblem::Empty => "is empty",
            NameProblem::DotOrDotDot => "is . or ..",
            NameProblem::Slash => "contains /",
            NameProblem::Nul => "contains a NUL byte",
            NameProblem::TooLong => "is longer than 255 bytes",
            NameProblem::NotUtf8 => "is not UTF-8",
            NameProblem::Absolute => "is absolute",
        })
    }
}

/// An identifier or path refused before any file was touched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value:?} {problem}: refused, nothing outside the cgroup root is touched")]
pub struct UnsafeName {
    /// What it is: `pod UID`, `container ID`, `cgroup path`, `file name`.
    pub what: &'static str,
    /// The value, lossily decoded when it is not UTF-8.
    pub value: String,
    pub problem: NameProblem,
}

fn component_problem(name: &[u8]) -> Option<NameProblem> {
    if name.is_empty() {
        Some(NameProblem::Empty)
    } else if name == b"." || name == b".." {
        Some(NameProblem::DotOrDotDot)
    } else if name.contains(&b'/') {
        Some(NameProblem::Slash)
    } else if name.contains(&0) {
        Some(NameProblem::Nul)
    } else if name.len() > NAME_MAX {
        Some(NameProblem::TooLong)
    } else {
        None
    }
}

/// Checks a pod UID or container ID that will become (part of) one path component.
pub fn check_identifier(what: &'static str, value: &str) -> Result<(), UnsafeName> {
    match component_problem(value.as_bytes()) {
        None => Ok(()),
        Some(problem) => Err(UnsafeName {
            what,
            value: value.to_string(),
            problem,
        }),
    }
}

/// A path relative to the cgroup root whose every component is a plain name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CgroupPath(String);

impl CgroupPath {
    /// `kubepods.slice/kubepods-burstable.slice/...`; the empty string is the root.
    pub fn new(relative: &str) -> Result<Self, UnsafeName> {
        let refuse = |problem| UnsafeName {
            what: "cgroup path",
            value: relative.to_string(),
            problem,
        };
        if relative.is_empty() {
            return Ok(CgroupPath(String::new()));
        }
        if relative.starts_with('/') {
            return Err(refuse(NameProblem::Absolute));
        }
        for component in relative.split('/') {
            if let Some(problem) = component_problem(component.as_bytes()) {
                return Err(refuse(problem));
            }
        }
        Ok(CgroupPath(relative.to_string()))
    }

    /// A path from the file system (a directory scan, an inotify event), which may not
    /// be UTF-8.
    pub fn from_os(relative: &OsStr) -> Result<Self, UnsafeName> {
        match relative.to_str() {
            Some(s) => Self::new(s),
            None => Err(UnsafeName {
                what: "cgroup path",
                value: relative.to_string_lossy().into_owned(),
                problem: NameProblem::NotUtf8,
            }),
        }
    }

    pub fn root() -> Self {
        CgroupPath(String::new())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Components below the root.
    pub fn depth(&self) -> usize {
        if self.0.is_empty() {
            0
        } else {
            self.0.split('/').count()
        }
    }

    pub fn parent(&self) -> Option<CgroupPath> {
        if self.0.is_empty() {
            return None;
        }
        Some(match self.0.rsplit_once('/') {
            Some((parent, _)) => CgroupPath(parent.to_string()),
            None => CgroupPath::root(),
        })
    }

    /// True when `self` is `other` or below it.
    pub fn is_within(&self, other: &CgroupPath) -> bool {
        other.0.is_empty()
            || self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }
}

impl fmt::Display for CgroupPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("/")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// Checks an interface file name (`memory.min`): one plain component.
pub(crate) fn check_file_name(name: &str) -> Result<(), UnsafeName> {
    match component_problem(name.as_bytes()) {
        None => Ok(()),
        Some(problem) => Err(UnsafeName {
            what: "file name",
            value: name.to_string(),
            problem,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_identifiers_are_refused_by_name() {
        let cases: &[(&str, NameProblem)] = &[
            ("", NameProblem::Empty),
            ("..", NameProblem::DotOrDotDot),
            (".", NameProblem::DotOrDotDot),
            ("a/b", NameProblem::Slash),
            ("../../etc", NameProblem::Slash),
            ("a\0b", NameProblem::Nul),
        ];
        for (value, problem) in cases {
            let err = check_identifier("pod UID", value).unwrap_err();
            assert_eq!(err.problem, *problem, "{value:?}");
        }
        let long = "x".repeat(256);
        assert_eq!(
            check_identifier("container ID", &long).unwrap_err().problem,
            NameProblem::TooLong
        );
        assert!(check_identifier("container ID", &"x".repeat(255)).is_ok());
        assert_eq!(
            check_identifier("pod UID", "a/b").unwrap_err().to_string(),
            "pod UID \"a/b\" contains /: refused, nothing outside the cgroup root is touched"
        );
    }

    #[test]
    fn paths_are_checked_per_component() {
        assert!(CgroupPath::new("kubepods.slice/kubepods-pod1.slice").is_ok());
        for bad in ["/etc", "a//b", "a/../b", "a/./b", "a/", "..", "a\0"] {
            assert!(CgroupPath::new(bad).is_err(), "{bad:?}");
        }
        use std::os::unix::ffi::OsStrExt;
        let err = CgroupPath::from_os(OsStr::from_bytes(b"kubepods/\xff")).unwrap_err();
        assert_eq!(err.problem, NameProblem::NotUtf8);
    }

    #[test]
    fn parents_and_depth() {
        let p = CgroupPath::new("a/b/c").unwrap();
        assert_eq!(p.depth(), 3);
        assert_eq!(p.parent().unwrap().as_str(), "a/b");
        assert_eq!(
            CgroupPath::new("a").unwrap().parent(),
            Some(CgroupPath::root())
        );
        assert_eq!(CgroupPath::root().parent(), None);
        assert!(p.is_within(&CgroupPath::new("a/b").unwrap()));
        assert!(!CgroupPath::new("a/bc")
            .unwrap()
            .is_within(&CgroupPath::new("a/b").unwrap()));
    }
}
