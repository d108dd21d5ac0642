//! Parsers for the sysfs files the agent reads NUMA capacity from. They take file
//! contents, not paths, so they are tested with captured text and never touch a disk.
//!
//! * `/sys/devices/system/node/nodeN/meminfo`: `Node 0 MemTotal:  16318048 kB`
//! * `/sys/devices/system/node/nodeN/hugepages/hugepages-<kB>kB/nr_hugepages`: a count

use std::collections::BTreeMap;

/// What is wrong with a sysfs file; `Display` gives the message, [`SysfsError::code`] a
/// stable name for condition reasons.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SysfsError {
    /// A node's meminfo has no MemTotal line.
    #[error("meminfo: no \"Node N MemTotal:\" line")]
    NoMemTotal,
    /// MemTotal is not a number.
    #[error("meminfo: MemTotal value {0:?} is not a number")]
    MemTotalNotANumber(String),
    /// MemTotal is not in kB.
    #[error("meminfo: MemTotal unit {0:?}, expected kB")]
    MemTotalUnit(Option<String>),
    /// MemTotal in bytes overflows.
    #[error("meminfo: MemTotal overflows")]
    MemTotalOverflow,
    /// A directory under `hugepages/` not named `hugepages-<size>kB`.
    #[error("{0:?} is not a hugepages-<size>kB directory")]
    NotAHugepagesDir(String),
    /// A hugepage pool's count is not a number.
    #[error("{dir}/nr_hugepages: {value:?} is not a number")]
    HugepageCountNotANumber {
        /// The pool's directory.
        dir: String,
        /// What `nr_hugepages` holds.
        value: String,
    },
    /// A hugepage pool's bytes overflow.
    #[error("{0}: hugepage pool overflows")]
    HugepagePoolOverflow(String),
}

impl SysfsError {
    /// A stable CamelCase name, for condition reasons.
    pub fn code(&self) -> &'static str {
        match self {
            SysfsError::NoMemTotal
            | SysfsError::MemTotalNotANumber(_)
            | SysfsError::MemTotalUnit(_)
            | SysfsError::MemTotalOverflow => "MalformedMeminfo",
            SysfsError::NotAHugepagesDir(_)
            | SysfsError::HugepageCountNotANumber { .. }
            | SysfsError::HugepagePoolOverflow(_) => "MalformedHugepages",
        }
    }
}

/// `MemTotal` of a node's meminfo, in bytes.
pub fn parse_meminfo_total(text: &str) -> Result<i64, SysfsError> {
    for line in text.lines() {
        let mut words = line.split_whitespace();
        // "Node", "<id>", "MemTotal:", "<n>", "kB"
        let (Some("Node"), Some(_), Some("MemTotal:"), Some(n), unit) = (
            words.next(),
            words.next(),
            words.next(),
            words.next(),
            words.next(),
        ) else {
            continue;
        };
        // A count of kB: the kernel never prints a sign.
        let kb: i64 = n
            .parse()
            .ok()
            .filter(|kb: &i64| *kb >= 0)
            .ok_or_else(|| SysfsError::MemTotalNotANumber(n.to_string()))?;
        return match unit {
            Some("kB") => kb.checked_mul(1024).ok_or(SysfsError::MemTotalOverflow),
            other => Err(SysfsError::MemTotalUnit(other.map(str::to_string))),
        };
    }
    Err(SysfsError::NoMemTotal)
}

/// `hugepages-2048kB` -> (`hugepages-2Mi`, 2097152).
pub fn hugepage_resource(dir_name: &str) -> Result<(String, i64), SysfsError> {
    let kb: i64 = dir_name
        .strip_prefix("hugepages-")
        .and_then(|s| s.strip_suffix("kB"))
        .and_then(|s| s.parse().ok())
        .filter(|kb| *kb > 0 && *kb < i64::MAX / 1024)
        .ok_or_else(|| SysfsError::NotAHugepagesDir(dir_name.to_string()))?;
    let bytes = kb * 1024;
    let name = if bytes % (1 << 30) == 0 {
        format!("hugepages-{}Gi", bytes >> 30)
    } else if bytes % (1 << 20) == 0 {
        format!("hugepages-{}Mi", bytes >> 20)
    } else {
        format!("hugepages-{kb}Ki")
    };
    Ok((name, bytes))
}

/// A NUMA node's capacity per memory type from its sysfs files.
///
/// The kubelet counts pre-allocated hugepages out of regular memory (they are part of
/// MemTotal but cannot back ordinary pages), so `memory` = MemTotal - hugepage pools.
pub fn node_capacity(
    meminfo: &str,
    hugepages: &[(&str, &str)],
) -> Result<BTreeMap<String, i64>, SysfsError> {
    let total = parse_meminfo_total(meminfo)?;
    let mut capacity = BTreeMap::new();
    let mut huge_total = 0i64;
    for (dir, nr) in hugepages {
        let (name, size) = hugepage_resource(dir)?;
        let count: i64 = nr
            .trim()
            .parse()
            .map_err(|_| SysfsError::HugepageCountNotANumber {
                dir: dir.to_string(),
                value: nr.trim().to_string(),
            })?;
        let bytes = size
            .checked_mul(count)
            .filter(|b| *b >= 0)
            .ok_or_else(|| SysfsError::HugepagePoolOverflow(dir.to_string()))?;
        huge_total = huge_total.saturating_add(bytes);
        capacity.insert(name, bytes);
    }
    capacity.insert(
        "memory".to_string(),
        total.saturating_sub(huge_total).max(0),
    );
    Ok(capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured in the test VM (see tests/fixtures/README.md).
    const NODE0: &str = include_str!("../../tests/fixtures/vm-node0-meminfo.txt");
    const NODE1: &str = include_str!("../../tests/fixtures/vm-node1-meminfo.txt");

    #[test]
    fn parses_two_captured_nodes() {
        assert_eq!(parse_meminfo_total(NODE0), Ok(211_316 * 1024));
        assert_eq!(parse_meminfo_total(NODE1), Ok(257_444 * 1024));
        // Each node held 8 pre-allocated 2Mi pages; the VM offered no 1Gi pool.
        let c0 = node_capacity(NODE0, &[("hugepages-2048kB", "8\n")]).unwrap();
        assert_eq!(c0["hugepages-2Mi"], 16 << 20);
        assert_eq!(c0["memory"], 211_316 * 1024 - (16 << 20));
        let c1 = node_capacity(
            NODE1,
            &[("hugepages-2048kB", "8\n"), ("hugepages-1048576kB", "0\n")],
        )
        .unwrap();
        assert_eq!(c1["hugepages-1Gi"], 0);
        assert_eq!(c1["memory"], 257_444 * 1024 - (16 << 20));
    }

    #[test]
    fn malformed_files_are_reported() {
        assert_eq!(parse_meminfo_total(""), Err(SysfsError::NoMemTotal));
        assert_eq!(
            parse_meminfo_total("").unwrap_err().to_string(),
            "meminfo: no \"Node N MemTotal:\" line"
        );
        assert_eq!(
            parse_meminfo_total("Node 0 MemTotal: x kB")
                .unwrap_err()
                .to_string(),
            "meminfo: MemTotal value \"x\" is not a number"
        );
        let unit = parse_meminfo_total("Node 0 MemTotal: 12 MB").unwrap_err();
        assert_eq!(
            unit.to_string(),
            "meminfo: MemTotal unit Some(\"MB\"), expected kB"
        );
        assert_eq!(unit.code(), "MalformedMeminfo");
        assert_eq!(
            parse_meminfo_total("Node 0 MemTotal: 9223372036854775807 kB"),
            Err(SysfsError::MemTotalOverflow)
        );
        assert_eq!(
            hugepage_resource("hugepages-abc").unwrap_err().to_string(),
            "\"hugepages-abc\" is not a hugepages-<size>kB directory"
        );
        let count = node_capacity(NODE1, &[("hugepages-2048kB", "many")]).unwrap_err();
        assert_eq!(
            count.to_string(),
            "hugepages-2048kB/nr_hugepages: \"many\" is not a number"
        );
        assert_eq!(count.code(), "MalformedHugepages");
        assert_eq!(
            hugepage_resource("hugepages-64kB").unwrap().0,
            "hugepages-64Ki"
        );
    }
}
