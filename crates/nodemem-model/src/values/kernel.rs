//! Kernel version checks. Memory QoS asks for 5.9 or later: older kernels can livelock
//! a cgroup at memory.high (fixed by commit b3ff92916af3). As in the v1.36 kubelet this
//! is a warning, never a refusal.

use crate::warning::Warning;

/// A kernel's `major.minor`, what the Memory QoS warnings compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    /// The major version.
    pub major: u32,
    /// The minor version.
    pub minor: u32,
}

/// The first kernel with the memory.high livelock fix.
pub const MEMORY_HIGH_LIVELOCK_FIX: KernelVersion = KernelVersion { major: 5, minor: 9 };

impl KernelVersion {
    /// Parses the leading `major.minor` of strings like `6.1.0-18-amd64` or `5.4.0-1103-aws`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(KernelVersion { major, minor })
    }
}

/// Warnings about the kernel for Memory QoS; empty when all is well.
pub fn memory_qos_kernel_warnings(kernel_version: Option<&str>) -> Vec<Warning> {
    match kernel_version {
        None | Some("") => vec![Warning::KernelVersionUnknown],
        Some(text) => match KernelVersion::parse(text) {
            None => vec![Warning::KernelVersionUnparsable {
                text: text.to_string(),
            }],
            Some(v) if v < MEMORY_HIGH_LIVELOCK_FIX => vec![Warning::KernelBeforeLivelockFix {
                version: text.to_string(),
            }],
            Some(_) => Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_distribution_kernel_strings() {
        assert_eq!(
            KernelVersion::parse("6.1.0-18-amd64"),
            Some(KernelVersion { major: 6, minor: 1 })
        );
        assert_eq!(
            KernelVersion::parse("5.4.0-1103-aws"),
            Some(KernelVersion { major: 5, minor: 4 })
        );
        assert_eq!(
            KernelVersion::parse("5.10"),
            Some(KernelVersion {
                major: 5,
                minor: 10
            })
        );
        assert_eq!(KernelVersion::parse("banana"), None);
        assert_eq!(KernelVersion::parse("6"), None);
    }

    #[test]
    fn warns_below_5_9_only() {
        assert_eq!(memory_qos_kernel_warnings(Some("5.8.18")).len(), 1);
        assert!(memory_qos_kernel_warnings(Some("5.8.18"))[0]
            .to_string()
            .contains("older than 5.9"));
        assert!(memory_qos_kernel_warnings(Some("5.9.0")).is_empty());
        assert!(memory_qos_kernel_warnings(Some("5.10.0-28-cloud-amd64")).is_empty());
        assert!(memory_qos_kernel_warnings(Some("6.1.0-18-amd64")).is_empty());
        assert!(memory_qos_kernel_warnings(Some("4.19.0")).len() == 1);
        assert_eq!(
            memory_qos_kernel_warnings(None),
            vec![Warning::KernelVersionUnknown]
        );
        assert!(memory_qos_kernel_warnings(None)[0]
            .to_string()
            .contains("no kernel version"));
        assert_eq!(
            memory_qos_kernel_warnings(Some("x"))[0].code(),
            "KernelVersionUnparsable"
        );
    }
}
