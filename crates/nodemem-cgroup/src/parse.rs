//! Parsers for the kernel's cgroup v2 file formats. They take the file's name (for
//! messages) and its text; every malformed input is an error naming the file and the
//! bad token, never a panic or a guess.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// What is wrong with a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseProblem {
    NotAByteCount,
    NotACount,
    NotAKeyValuePair,
    DuplicateKey,
    MissingKey,
    NotAPressureLine,
    NotAPressureField,
    NotAPercentage,
    BadRange,
    NotAControllerName,
}

impl fmt::Display for ParseProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseProblem::NotAByteCount => "not a byte count or \"max\"",
            ParseProblem::NotACount => "not a non-negative count",
            ParseProblem::NotAKeyValuePair => "not a \"<key> <count>\" line",
            ParseProblem::DuplicateKey => "key repeated",
            ParseProblem::MissingKey => "key missing",
            ParseProblem::NotAPressureLine => {
                "not a \"some|full avg10=.. avg60=.. avg300=.. total=..\" line"
            }
            ParseProblem::NotAPressureField => {
                "not the expected avg10=, avg60=, avg300=, total= field"
            }
            ParseProblem::NotAPercentage => "not a percentage from 0 to 100",
            ParseProblem::BadRange => "not a NUMA node or CPU range like 0, 0-3 or 0,2-3",
            ParseProblem::NotAControllerName => "not a controller name",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {problem}: {token:?}")]
pub struct ParseError {
    pub file: String,
    pub token: String,
    pub problem: ParseProblem,
}

fn err(file: &str, token: &str, problem: ParseProblem) -> ParseError {
    ParseError {
        file: file.to_string(),
        token: token.to_string(),
        problem,
    }
}

/// The text without the one trailing newline the kernel prints.
fn body(text: &str) -> &str {
    text.strip_suffix('\n').unwrap_or(text)
}

fn count(file: &str, token: &str, problem: ParseProblem) -> Result<u64, ParseError> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(file, token, problem));
    }
    token.parse().map_err(|_| err(file, token, problem))
}

/// `memory.min`, `memory.low`, `memory.high`, `memory.max`: bytes or `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryValue {
    Bytes(u64),
    Max,
}

pub fn memory_value(file: &str, text: &str) -> Result<MemoryValue, ParseError> {
    let t = body(text);
    if t == "max" {
        return Ok(MemoryValue::Max);
    }
    count(file, t, ParseProblem::NotAByteCount).map(MemoryValue::Bytes)
}

/// `memory.events` (or `memory.events.local`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryEvents {
    pub low: u64,
    pub high: u64,
    pub max: u64,
    pub oom: u64,
    pub oom_kill: u64,
    /// Kernels before 5.17 do not print it; 0 then.
    pub oom_group_kill: u64,
}

/// `key value` lines; keys a newer kernel adds are kept, not refused.
fn flat_keyed(file: &str, text: &str) -> Result<BTreeMap<String, u64>, ParseError> {
    let mut out = BTreeMap::new();
    for line in body(text).lines() {
        let mut words = line.split(' ');
        let (Some(key), Some(value), None) = (words.next(), words.next(), words.next()) else {
            return Err(err(file, line, ParseProblem::NotAKeyValuePair));
        };
        if key.is_empty() {
            return Err(err(file, line, ParseProblem::NotAKeyValuePair));
        }
        let v = count(file, value, ParseProblem::NotACount)?;
        if out.insert(key.to_string(), v).is_some() {
            return Err(err(file, key, ParseProblem::DuplicateKey));
        }
    }
    Ok(out)
}

pub fn memory_events(file: &str, text: &str) -> Result<MemoryEvents, ParseError> {
    let keyed = flat_keyed(file, text)?;
    let get = |key: &str| {
        keyed
            .get(key)
            .copied()
            .ok_or_else(|| err(file, key, ParseProblem::MissingKey))
    };
    Ok(MemoryEvents {
        low: get("low")?,
        high: get("high")?,
        max: get("max")?,
        oom: get("oom")?,
        oom_kill: get("oom_kill")?,
        oom_group_kill: keyed.get("oom_group_kill").copied().unwrap_or(0),
    })
}

/// `memory.stat`: one `<key> <count>` line per statistic (bytes or events).
pub fn memory_stat(file: &str, text: &str) -> Result<BTreeMap<String, u64>, ParseError> {
    flat_keyed(file, text)
}

/// Refaults counted in a parsed `memory.stat`: pages evicted and read back soon after
/// (`workingset_refault_anon` + `workingset_refault_file`; before Linux 5.9 one
/// `workingset_refault`). None: the kernel counts none.
pub fn refaults(stat: &BTreeMap<String, u64>) -> Option<u64> {
    match (
        stat.get("workingset_refault_anon"),
        stat.get("workingset_refault_file"),
    ) {
        (Some(anon), Some(file)) => Some(anon.saturating_add(*file)),
        _ => stat.get("workingset_refault").copied(),
    }
}

/// The working set as the kubelet's eviction counts it (cAdvisor's rule):
/// memory.current minus the inactive file pages of `memory.stat`, which the kernel
/// reclaims cheaply; page cache alone is not memory a container needs.
pub fn working_set(
    file: &str,
    current: u64,
    stat: &BTreeMap<String, u64>,
) -> Result<u64, ParseError> {
    let inactive = stat
        .get("inactive_file")
        .ok_or_else(|| err(file, "inactive_file", ParseProblem::MissingKey))?;
    Ok(current.saturating_sub(*inactive))
}

/// One PSI line: the share of time stalled over 10 s, 60 s and 300 s, and the total
/// stall time in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PressureLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_us: u64,
}

/// `memory.pressure`: `some` always, `full` on every cgroup (not on the root's
/// `cpu.pressure` of old kernels, hence optional).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pressure {
    pub some: PressureLine,
    pub full: Option<PressureLine>,
}

fn percentage(file: &str, token: &str) -> Result<f64, ParseError> {
    let ok = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && token.bytes().filter(|b| *b == b'.').count() <= 1;
    let value: f64 = if ok {
        token
            .parse()
            .map_err(|_| err(file, token, ParseProblem::NotAPercentage))?
    } else {
        return Err(err(file, token, ParseProblem::NotAPercentage));
    };
    if (0.0..=100.0).contains(&value) {
        Ok(value)
    } else {
        Err(err(file, token, ParseProblem::NotAPercentage))
    }
}

fn pressure_line(file: &str, fields: &[&str]) -> Result<PressureLine, ParseError> {
    let expect = ["avg10=", "avg60=", "avg300=", "total="];
    let mut values = [""; 4];
    for (i, prefix) in expect.iter().enumerate() {
        let field = fields[i];
        values[i] = field
            .strip_prefix(prefix)
            .ok_or_else(|| err(file, field, ParseProblem::NotAPressureField))?;
    }
    Ok(PressureLine {
        avg10: percentage(file, values[0])?,
        avg60: percentage(file, values[1])?,
        avg300: percentage(file, values[2])?,
        total_us: count(file, values[3], ParseProblem::NotACount)?,
    })
}

pub fn pressure(file: &str, text: &str) -> Result<Pressure, ParseError> {
    let mut some = None;
    let mut full = None;
    for line in body(text).lines() {
        let words: Vec<&str> = line.split(' ').collect();
        if words.len() != 5 {
            return Err(err(file, line, ParseProblem::NotAPressureLine));
        }
        let slot = match words[0] {
            "some" => &mut some,
            "full" => &mut full,
            _ => return Err(err(file, line, ParseProblem::NotAPressureLine)),
        };
        if slot.is_some() {
            return Err(err(file, words[0], ParseProblem::DuplicateKey));
        }
        *slot = Some(pressure_line(file, &words[1..])?);
    }
    Ok(Pressure {
        some: some.ok_or_else(|| err(file, "some", ParseProblem::MissingKey))?,
        full,
    })
}

/// `cpuset.mems`, `cpuset.mems.effective`, `cpuset.cpus`: `0-3,5`; empty is the
/// empty set (a child's `cpuset.mems` before anything is written: use the parent's).
pub fn range_list(file: &str, text: &str) -> Result<BTreeSet<u32>, ParseError> {
    let t = body(text);
    let mut set = BTreeSet::new();
    if t.is_empty() {
        return Ok(set);
    }
    for part in t.split(',') {
        let bad = || err(file, part, ParseProblem::BadRange);
        let number = |s: &str| -> Result<u32, ParseError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            s.parse().map_err(|_| bad())
        };
        let (start, end) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(part)?;
                (n, n)
            }
        };
        // The kernel never prints a descending range; a huge one is a corrupt file.
        if start > end || end - start > 4096 {
            return Err(bad());
        }
        set.extend(start..=end);
    }
    Ok(set)
}

/// The kernel's form of a set: `0-1,3`.
pub fn render_range_list(set: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().unwrap_or(end);
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// `cgroup.controllers`, `cgroup.subtree_control`: space-separated controller names.
pub fn controllers(file: &str, text: &str) -> Result<BTreeSet<String>, ParseError> {
    let mut set = BTreeSet::new();
    let t = body(text);
    if t.is_empty() {
        return Ok(set);
    }
    for name in t.split(' ') {
        let ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(err(file, name, ParseProblem::NotAControllerName));
        }
        if !set.insert(name.to_string()) {
            return Err(err(file, name, ParseProblem::DuplicateKey));
        }
    }
    Ok(set)
}
