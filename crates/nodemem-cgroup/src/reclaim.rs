//! Proactive reclaim's side of the kernel (issue 46): a cgroup's reading as the step
//! controller takes it (`nodemem_model::feedback::reclaim::Sample`, from
//! memory.current, memory.stat and memory.pressure), and the write to
//! `memory.reclaim` (Linux 5.19+, Documentation/admin-guide/cgroup-v2.rst: "If less
//! bytes are reclaimed than the specified amount, -EAGAIN is returned"), which is not
//! a failure but the kernel saying how much it found.

use nodemem_model::feedback::reclaim::Sample;

use crate::fs::{CgroupError, CgroupFs};
use crate::parse::{memory_stat, memory_value, pressure, MemoryValue, ParseError, ParseProblem};
use crate::CgroupPath;

/// The file proactive reclaim writes.
pub const MEMORY_RECLAIM: &str = "memory.reclaim";

/// What the kernel made of a `memory.reclaim` write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaimed {
    /// At least what was asked.
    All,
    /// Less than asked (EAGAIN): the cgroup had no more it could take then.
    Partly,
}

/// The files of one cgroup a reading takes, as read.
#[derive(Clone, Copy, Debug)]
pub struct ReclaimFiles<'a> {
    pub current: &'a str,
    pub stat: &'a str,
    pub pressure: &'a str,
}

/// A reading at `at` of a cgroup whose floor is `floor` (what its pod requested) and
/// whose anonymous pages swap can take or not (`swap`); an error names the file and
/// what it lacks.
pub fn sample(
    at: u64,
    files: ReclaimFiles<'_>,
    floor: i64,
    swap: bool,
) -> Result<Sample, ParseError> {
    // memory.current is bytes; a memory_value parse refuses anything else but `max`.
    let MemoryValue::Bytes(current) = memory_value("memory.current", files.current)? else {
        return Err(missing("memory.current", "a byte count, not max"));
    };
    let stat = memory_stat("memory.stat", files.stat)?;
    let get = |key: &str| {
        stat.get(key)
            .copied()
            .ok_or_else(|| missing("memory.stat", key))
    };
    let bytes = |key: &str| get(key).map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    Ok(Sample {
        at,
        stall_total_us: pressure("memory.pressure", files.pressure)?.some.total_us,
        current: i64::try_from(current).unwrap_or(i64::MAX),
        inactive_file: bytes("inactive_file")?,
        active_file: bytes("active_file")?,
        anon: bytes("anon")?,
        refaults: get("workingset_refault_anon")?.saturating_add(get("workingset_refault_file")?),
        floor,
        swap,
    })
}

fn missing(file: &str, what: &str) -> ParseError {
    ParseError {
        file: file.to_string(),
        token: what.to_string(),
        problem: ParseProblem::MissingKey,
    }
}

impl CgroupFs {
    /// Asks the kernel to reclaim `bytes` from `cgroup`. EAGAIN (less was found) is
    /// [`Reclaimed::Partly`]; any other error carries the path and the value.
    pub fn reclaim(&self, cgroup: &CgroupPath, bytes: i64) -> Result<Reclaimed, CgroupError> {
        match self.write(cgroup, MEMORY_RECLAIM, &bytes.to_string()) {
            Ok(()) => Ok(Reclaimed::All),
            Err(CgroupError::Io { source, .. }) if source.raw_os_error() == Some(libc::EAGAIN) => {
                Ok(Reclaimed::Partly)
            }
            Err(e) => Err(e),
        }
    }
}

impl CgroupFs {
    /// Whether `cgroup`'s memory.reclaim takes the `swappiness=` key (Linux 6.11,
    /// Documentation/admin-guide/cgroup-v2.rst "The following nested keys are
    /// defined"): "0 swappiness=60" asks for nothing, so it reclaims nothing where it
    /// is taken, and a kernel without the key refuses it (EINVAL). Any other error
    /// carries the path.
    pub fn reclaim_takes_swappiness(&self, cgroup: &CgroupPath) -> Result<bool, CgroupError> {
        match self.write(cgroup, MEMORY_RECLAIM, "0 swappiness=60") {
            Ok(()) => Ok(true),
            Err(CgroupError::Io { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// memory.stat as Linux 6.1 prints it for a container (the keys the reading
    /// takes, among others).
    const STAT: &str = "anon 1048576\nfile 734003200\nkernel 122880\ninactive_anon 524288\nactive_anon 524288\ninactive_file 629145600\nactive_file 104857600\nworkingset_refault_anon 3\nworkingset_refault_file 40\n";
    const PRESSURE: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n";

    #[test]
    fn a_reading_takes_the_stall_the_cold_pages_and_the_refaults() {
        let files = ReclaimFiles {
            current: "735174656\n",
            stat: STAT,
            pressure: PRESSURE,
        };
        let s = sample(7, files, 64 << 20, false).unwrap();
        assert_eq!(
            s,
            Sample {
                at: 7,
                stall_total_us: 1234,
                current: 735_174_656,
                inactive_file: 629_145_600,
                active_file: 104_857_600,
                anon: 1_048_576,
                refaults: 43,
                floor: 64 << 20,
                swap: false,
            }
        );
    }

    #[test]
    fn a_reading_without_a_key_names_the_file_and_the_key() {
        let stat = STAT.replace("workingset_refault_file 40\n", "");
        let files = ReclaimFiles {
            current: "735174656\n",
            stat: &stat,
            pressure: PRESSURE,
        };
        let e = sample(0, files, 0, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "memory.stat: key missing: \"workingset_refault_file\""
        );
        let files = ReclaimFiles {
            current: "max\n",
            stat: STAT,
            pressure: PRESSURE,
        };
        assert_eq!(
            sample(0, files, 0, false).unwrap_err().file,
            "memory.current"
        );
    }

    #[test]
    fn the_write_goes_to_memory_reclaim_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cg = dir.path().join("pod");
        std::fs::create_dir(&cg).unwrap();
        let fs = CgroupFs::new(dir.path());
        let pod = CgroupPath::new("pod").unwrap();
        // No memory.reclaim (a kernel before 5.19): an error naming it, nothing made.
        let e = fs.reclaim(&pod, 4096).unwrap_err();
        assert!(e.to_string().contains("memory.reclaim"), "{e}");
        assert!(!cg.join(MEMORY_RECLAIM).exists());
        std::fs::write(cg.join(MEMORY_RECLAIM), "").unwrap();
        assert_eq!(fs.reclaim(&pod, 8192).unwrap(), Reclaimed::All);
        assert_eq!(
            std::fs::read_to_string(cg.join(MEMORY_RECLAIM)).unwrap(),
            "8192"
        );
    }
}
