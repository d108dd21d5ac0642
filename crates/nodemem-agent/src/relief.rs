//! Relief for containers memory.high chokes (issue 19, `memoryQoS.relief`, under
//! `enforcement: Agent`). Each managed container with a memory.high gets a PSI trigger
//! on its `memory.pressure` (`full`, the policy's threshold over a 10 s window): the
//! kernel wakes the agent when it stalls, a calm container is never read. A container
//! that stalls is then read on every tick (PSI `full` avg10 and its working set) and fed
//! to [`nodemem_model::feedback::relief`]'s state machine, which decides: raise its memory.high
//! for the relief period (the applier writes it in its next pass, and keeps it there
//! until restored, systemd's record included), put it back, or report a container that
//! needs it again within the repeat window. On a tree that is not cgroup2 (tests'
//! temp dirs) there are no triggers: every container is read on every tick instead.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodemem_api::config::{ReliefSummary, RelievedContainer};
use nodemem_cgroup::parse::{memory_stat, pressure, working_set};
use nodemem_cgroup::psi::FullTrigger;
use nodemem_cgroup::{CgroupFs, CgroupPath};
use nodemem_model::feedback::relief::{Action, ContainerRelief, Reading, ReliefSettings};
use nodemem_model::node::DesiredNode;
use nodemem_model::values::cgroup::{MEMORY_HIGH, MEMORY_MAX};
use tokio::sync::mpsc;

/// The PSI window: the kernel's longest, so a trigger fires at most every 10 s.
const WINDOW_US: u64 = 10_000_000;
/// How many relieved containers status names.
const NAMED: usize = 10;

/// A container being watched.
#[derive(Debug)]
struct Tracked {
    namespace: String,
    pod: String,
    uid: String,
    container: String,
    /// The policy's memory.high (not the raised one while relieved).
    memory_high: i64,
    memory_max: Option<i64>,
    state: ContainerRelief,
    /// While relieved: raised to (None: `max`) until when.
    raised: Option<(Option<i64>, Time)>,
    /// How the agent learns that it stalls.
    watch: Watch,
    /// Attempts to arm the trigger the kernel refused (the first is warned about).
    arm_failures: u32,
    /// Its memory.pressure cannot be read (PSI is off): relief cannot see it choke.
    blind: bool,
}

/// How a tracked container is watched.
#[derive(Debug)]
enum Watch {
    /// A task waits on its PSI trigger: it is read only once the kernel says it stalls.
    Armed(tokio::task::JoinHandle<()>),
    /// Its cgroup is there but has no trigger (a tree that is not cgroup2, a kernel
    /// that refuses): read on every tick.
    Polled,
    /// No cgroup (an init container that finished, a container being removed):
    /// nothing to read; arming is tried again after each pass.
    Absent,
}

impl Watch {
    fn armed(&self) -> bool {
        matches!(self, Watch::Armed(_))
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Watch::Armed(t) = &self.watch {
            t.abort();
        }
    }
}

/// What a step decided for one container, for Events, metrics and the applier.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub container: String,
    /// The container's cgroup.
    pub path: String,
    pub memory_high: i64,
    pub full_avg10: f64,
    pub action: Action,
}

/// Every watched container's relief, since the revision was applied.
pub struct Relief {
    origin: Instant,
    revision: String,
    settings: Option<ReliefSettings>,
    tracked: BTreeMap<String, Tracked>,
    fired: mpsc::UnboundedSender<String>,
    reliefs: u64,
    refused: u64,
}

impl Relief {
    /// The relief and the stream of cgroups whose trigger fired.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<String>) {
        let (fired, rx) = mpsc::unbounded_channel();
        (
            Relief {
                origin: Instant::now(),
                revision: String::new(),
                settings: None,
                tracked: BTreeMap::new(),
                fired,
                reliefs: 0,
                refused: 0,
            },
            rx,
        )
    }

    /// After a pass: the containers to watch under `settings` (None: relief is off,
    /// everything raised goes back at the next pass), all managed ones but the agent's
    /// own (`own_cgroup`: nodemem never sets its values, the kernel refuses it).
    /// Returns the overrides the applier must keep: memory.high of each relieved
    /// container (None: `max`).
    pub fn refresh(
        &mut self,
        revision: &str,
        settings: Option<ReliefSettings>,
        desired: &DesiredNode<'_>,
        own_cgroup: Option<&str>,
        fs: &CgroupFs,
    ) -> BTreeMap<String, Option<i64>> {
        if self.revision != revision {
            self.revision = revision.to_string();
            self.reliefs = 0;
            self.refused = 0;
        }
        if settings != self.settings {
            // New thresholds: triggers are armed again.
            self.tracked.clear();
            self.settings = settings;
        }
        let Some(settings) = settings else {
            return BTreeMap::new();
        };
        let mut now: BTreeMap<String, Tracked> = BTreeMap::new();
        for (pod, c, path) in desired.managed_containers() {
            if Some(path) == own_cgroup {
                continue;
            }
            let bytes = |file: &str| c.values.get(file).and_then(|v| v.bytes());
            match self.tracked.remove(path) {
                Some(mut t) => {
                    // A trigger that could not be armed is tried again (a container's
                    // files can be missing for a moment as its cgroup is created).
                    if !t.watch.armed() {
                        t.watch = self.arm(fs, path, settings, t.arm_failures);
                        t.arm_failures += u32::from(matches!(t.watch, Watch::Polled));
                    }
                    // While relieved, the desired value is the raised one.
                    if !t.state.relieved() {
                        match bytes(MEMORY_HIGH) {
                            Some(high) => t.memory_high = high,
                            None => continue,
                        }
                    }
                    t.memory_max = bytes(MEMORY_MAX);
                    now.insert(path.to_string(), t);
                }
                None => {
                    let Some(high) = bytes(MEMORY_HIGH) else {
                        continue;
                    };
                    let watch = self.arm(fs, path, settings, 0);
                    now.insert(
                        path.to_string(),
                        Tracked {
                            namespace: pod.namespace.to_string(),
                            pod: pod.name.to_string(),
                            uid: pod.uid.to_string(),
                            container: c.name.to_string(),
                            memory_high: high,
                            memory_max: bytes(MEMORY_MAX),
                            state: ContainerRelief::default(),
                            raised: None,
                            arm_failures: u32::from(matches!(watch, Watch::Polled)),
                            watch,
                            blind: false,
                        },
                    );
                }
            }
        }
        // Where no trigger could be armed, is there a memory.pressure to read at all?
        // Without PSI (`psi=0`) there is none: relief cannot see those containers, and
        // its summary says so rather than reading as "nothing choked".
        for (path, t) in &mut now {
            t.blind = matches!(t.watch, Watch::Polled)
                && CgroupPath::new(path).map_or(true, |c| fs.read(&c, "memory.pressure").is_err());
        }
        let blind = now.values().filter(|t| t.blind).count();
        let was_blind = self.tracked.values().filter(|t| t.blind).count();
        if blind > 0 && was_blind == 0 {
            tracing::warn!(
                containers = blind,
                "relief cannot run for these containers: their memory.pressure cannot be read (PSI is off; boot the kernel with psi=1)"
            );
        }
        self.tracked = now;
        self.overrides()
    }

    /// A PSI trigger on the container's memory.pressure, waited on by a task that
    /// names the cgroup on `fired`; where the tree has no PSI (not cgroup2, or the
    /// kernel refuses) the container is polled, read on every tick; a container without
    /// a cgroup is absent.
    fn arm(
        &self,
        fs: &CgroupFs,
        path: &str,
        settings: ReliefSettings,
        failed_before: u32,
    ) -> Watch {
        use tokio::io::unix::AsyncFd;
        use tokio::io::Interest;
        let Ok(cgroup) = CgroupPath::new(path) else {
            return Watch::Absent;
        };
        if !fs.exists(&cgroup) {
            return Watch::Absent;
        }
        if !fs.is_cgroup2() {
            return Watch::Polled;
        }
        let trigger = FullTrigger::percent_of(settings.full_pressure_percent, WINDOW_US);
        let fd = match fs.pressure_trigger(&cgroup, trigger) {
            Ok(fd) => fd,
            // Gone between the look and the write: tried again after the next pass.
            Err(e) if e.is_vanished() => return Watch::Absent,
            Err(e) => {
                if failed_before == 0 {
                    tracing::warn!(error = %e, "no PSI trigger yet: this container is read on every tick until one is armed");
                } else {
                    tracing::debug!(error = %e, "no PSI trigger yet");
                }
                return Watch::Polled;
            }
        };
        // SAFETY: an OwnedFd is open until dropped and always gives the same raw fd;
        // the AsyncFd owns it from here on.
        let registered = unsafe { AsyncFd::register_with_interest(fd, Interest::PRIORITY) };
        let fd = match registered {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(error = %e, cgroup = path, "cannot wait on the PSI trigger: read on every tick");
                return Watch::Polled;
            }
        };
        let fired = self.fired.clone();
        let path = path.to_string();
        Watch::Armed(tokio::spawn(async move {
            loop {
                let Ok(mut ready) = fd.ready(Interest::PRIORITY).await else {
                    return;
                };
                // The cgroup went away: its trigger is gone with it.
                if ready.ready().is_error() || ready.ready().is_read_closed() {
                    return;
                }
                ready.clear_ready();
                if fired.send(path.clone()).is_err() {
                    return;
                }
            }
        }))
    }

    /// The cgroups to read now: those whose trigger fired, every active one (choking,
    /// relieved, reported), and every polled one; never an absent one.
    pub fn due<'a>(&'a self, fired: &'a [String]) -> Vec<String> {
        let due: Vec<String> = self
            .tracked
            .iter()
            .filter(|(p, t)| match t.watch {
                Watch::Absent => false,
                Watch::Polled => true,
                Watch::Armed(_) => t.state.active() || fired.contains(*p),
            })
            .map(|(p, _)| p.clone())
            .collect();
        due
    }

    /// Steps each due container with what `read` gives (PSI full avg10 and working
    /// set; None: gone or unreadable, skipped).
    pub fn step(
        &mut self,
        due: &[String],
        mut read: impl FnMut(&str) -> Option<(f64, i64)>,
    ) -> Vec<Decision> {
        let Some(settings) = self.settings else {
            return Vec::new();
        };
        let at = self.origin.elapsed().as_secs();
        let mut out = Vec::new();
        for path in due {
            let Some(t) = self.tracked.get_mut(path) else {
                continue;
            };
            let Some((full_avg10, working_set)) = read(path) else {
                continue;
            };
            let action = t.state.step(
                &Reading {
                    at,
                    full_avg10,
                    working_set,
                    memory_high: t.memory_high,
                    memory_max: t.memory_max,
                },
                &settings,
            );
            match action {
                Action::Nothing => continue,
                Action::Relieve { to, until } => {
                    let left = i64::try_from(until.saturating_sub(at)).unwrap_or(i64::MAX);
                    let wall = k8s_openapi::jiff::Timestamp::now()
                        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(left))
                        .unwrap_or(k8s_openapi::jiff::Timestamp::MAX);
                    t.raised = Some((to, Time(wall)));
                    self.reliefs += 1;
                }
                Action::Restore { .. } => t.raised = None,
                Action::Report { .. } => self.refused += 1,
            }
            out.push(Decision {
                namespace: t.namespace.clone(),
                pod: t.pod.clone(),
                uid: t.uid.clone(),
                container: t.container.clone(),
                path: path.clone(),
                memory_high: t.memory_high,
                full_avg10,
                action,
            });
        }
        out
    }

    /// memory.high of each relieved container, for the applier (None: `max`).
    pub fn overrides(&self) -> BTreeMap<String, Option<i64>> {
        self.tracked
            .iter()
            .filter_map(|(p, t)| t.raised.as_ref().map(|(to, _)| (p.clone(), *to)))
            .collect()
    }

    /// Reliefs given since `revision` was applied (0 for any other revision: counts
    /// start over with a new one).
    pub fn reliefs_since(&self, revision: &str) -> u64 {
        if self.revision == revision {
            self.reliefs
        } else {
            0
        }
    }

    /// Containers watched (each with a cgroup), and of them those without a PSI
    /// trigger (read every tick). Absent ones (no cgroup) are neither.
    pub fn watched(&self) -> (usize, usize) {
        let count = |w: fn(&Watch) -> bool| self.tracked.values().filter(|t| w(&t.watch)).count();
        (
            count(|w| !matches!(w, Watch::Absent)),
            count(|w| matches!(w, Watch::Polled)),
        )
    }

    /// The summary for status; None while relief is off.
    pub fn summary(&self) -> Option<ReliefSummary> {
        self.settings?;
        let relieved = self
            .tracked
            .values()
            .filter_map(|t| {
                let (to, until) = t.raised.clone()?;
                Some(RelievedContainer {
                    pod: format!("{}/{}", t.namespace, t.pod),
                    container: t.container.clone(),
                    memory_high: t.memory_high,
                    raised_to: to,
                    until,
                })
            })
            .take(NAMED)
            .collect();
        let blind = self.tracked.values().filter(|t| t.blind).count();
        Some(ReliefSummary {
            reliefs: i64::try_from(self.reliefs).unwrap_or(i64::MAX),
            refused: i64::try_from(self.refused).unwrap_or(i64::MAX),
            relieved,
            without_pressure: i64::try_from(blind).unwrap_or(i64::MAX),
        })
    }
}

/// One container's PSI `full` avg10 and working set; None when gone or unreadable.
pub fn read(fs: &CgroupFs, path: &str) -> Option<(f64, i64)> {
    let cgroup = CgroupPath::new(path).ok()?;
    let full = pressure(
        "memory.pressure",
        &fs.read(&cgroup, "memory.pressure").ok()?,
    )
    .ok()?
    .full?
    .avg10;
    let current: u64 = fs
        .read(&cgroup, "memory.current")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let stat = memory_stat("memory.stat", &fs.read(&cgroup, "memory.stat").ok()?).ok()?;
    let ws = working_set("memory.stat", current, &stat).ok()?;
    Some((full, i64::try_from(ws).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_node::{burstable, desired, facts, path_of, settings, MI};
    use nodemem_model::values::memory_qos::ReservationPolicy;

    /// Relieved at once, for no time: each step moves the state machine on.
    const AT_ONCE: ReliefSettings = ReliefSettings {
        full_pressure_percent: 20,
        sustained_seconds: 0,
        relief_seconds: 0,
        repeat_window_seconds: 3600,
    };

    #[tokio::test]
    async fn a_choking_container_is_relieved_restored_then_reported_and_page_cache_is_left_alone() {
        let settings = settings(0.5, ReservationPolicy::None);
        let facts = facts();
        let pods = vec![
            burstable("thrash", &"a".repeat(64)),
            burstable("cache", &"b".repeat(64)),
        ];
        let desired = desired(&settings, &facts, &pods);
        let path = |name: &str| path_of(&desired, name);
        let (thrash, cache) = (path("thrash"), path("cache"));
        // A temp dir is no cgroup2: no triggers, every container read on every tick.
        let root = tempfile::tempdir().unwrap();
        for p in [&thrash, &cache] {
            std::fs::create_dir_all(root.path().join(p)).unwrap();
        }
        let fs = CgroupFs::new(root.path());
        let (mut relief, _fired) = Relief::new();
        assert!(relief
            .refresh("r1", Some(AT_ONCE), &desired, None, &fs)
            .is_empty());
        assert_eq!(relief.watched(), (2, 2));
        let high = 160 * MI;
        // thrash sits at memory.high, fully stalled; cache is stalled too (its page
        // cache churns) with a small working set.
        let read = |p: &str| {
            if p == thrash {
                Some((55.0, high))
            } else if p == cache {
                Some((55.0, 20 * MI))
            } else {
                None
            }
        };
        let due = relief.due(&[]);
        let d = relief.step(&due, read);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            (d[0].pod.as_str(), d[0].container.as_str()),
            ("thrash", "app")
        );
        assert!(matches!(d[0].action, Action::Relieve { to: Some(t), .. } if t == 256 * MI));
        assert_eq!(
            relief.overrides(),
            BTreeMap::from([(thrash.clone(), Some(256 * MI))])
        );
        let s = relief.summary().unwrap();
        assert_eq!((s.reliefs, s.refused), (1, 0));
        assert_eq!(s.relieved[0].pod, "shop/thrash");
        assert_eq!(s.relieved[0].memory_high, high);
        assert_eq!(s.relieved[0].raised_to, Some(256 * MI));
        // The pass after: desired now carries the raised value; the policy's is kept.
        relief.refresh("r1", Some(AT_ONCE), &desired, None, &fs);
        assert_eq!(relief.overrides().len(), 1);
        // The period is over: back to the policy's memory.high.
        let d = relief.step(&relief.due(&[]), read);
        assert_eq!(d[0].action, Action::Restore { to: high });
        assert!(relief.overrides().is_empty());
        // Choking again within the repeat window: reported, not relieved.
        let d = relief.step(&relief.due(&[]), read);
        assert!(matches!(d[0].action, Action::Report { .. }), "{d:?}");
        assert!(relief.overrides().is_empty());
        let s = relief.summary().unwrap();
        assert_eq!((s.reliefs, s.refused), (1, 1));
        assert_eq!(relief.reliefs_since("r1"), 1);
        assert_eq!(relief.reliefs_since("r2"), 0);
        // A new revision counts from zero; relief off drops everything.
        relief.refresh("r2", Some(AT_ONCE), &desired, None, &fs);
        assert_eq!(relief.summary().unwrap().reliefs, 0);
        assert!(relief.refresh("r2", None, &desired, None, &fs).is_empty());
        assert_eq!(relief.summary(), None);
        assert_eq!(relief.watched(), (0, 0));
    }

    #[tokio::test]
    async fn the_agents_own_container_is_not_watched_and_a_container_without_a_cgroup_is_not_read()
    {
        let settings = settings(0.5, ReservationPolicy::None);
        let facts = facts();
        let pods = vec![
            burstable("agent", &"a".repeat(64)),
            burstable("done", &"b".repeat(64)),
            burstable("app", &"c".repeat(64)),
        ];
        let desired = desired(&settings, &facts, &pods);
        let path = |name: &str| path_of(&desired, name);
        let (own, done, app) = (path("agent"), path("done"), path("app"));
        let root = tempfile::tempdir().unwrap();
        // Every cgroup is there but the finished one's.
        for p in [&own, &app] {
            std::fs::create_dir_all(root.path().join(p)).unwrap();
        }
        let fs = CgroupFs::new(root.path());
        let (mut relief, _fired) = Relief::new();
        relief.refresh("r1", Some(AT_ONCE), &desired, Some(&own), &fs);
        // The own container is not tracked at all; the finished one is neither watched
        // nor polled, and never read.
        assert_eq!(relief.watched(), (1, 1));
        assert_eq!(relief.due(&[]), vec![app.clone()]);
        let mut read = Vec::new();
        relief.step(&relief.due(&[done.clone(), own.clone()]), |p| {
            read.push(p.to_string());
            None
        });
        assert_eq!(read, vec![app.clone()]);
        // Its cgroup appears (a container restarted under the same ID): watched from
        // the next pass on.
        std::fs::create_dir_all(root.path().join(&done)).unwrap();
        relief.refresh("r1", Some(AT_ONCE), &desired, Some(&own), &fs);
        assert_eq!(relief.watched(), (2, 2));
        let mut due = relief.due(&[]);
        due.sort();
        let mut both = vec![app, done];
        both.sort();
        assert_eq!(due, both);
    }

    #[tokio::test]
    async fn containers_whose_pressure_cannot_be_read_are_reported_not_taken_as_calm() {
        let settings = settings(0.5, ReservationPolicy::None);
        let facts = facts();
        let pods = vec![
            burstable("seen", &"a".repeat(64)),
            burstable("blind", &"b".repeat(64)),
        ];
        let desired = desired(&settings, &facts, &pods);
        let (seen, blind) = (path_of(&desired, "seen"), path_of(&desired, "blind"));
        let root = tempfile::tempdir().unwrap();
        for p in [&seen, &blind] {
            std::fs::create_dir_all(root.path().join(p)).unwrap();
        }
        // As the kernel shows it with PSI on; without (psi=0) there is no such file.
        std::fs::write(
            root.path().join(&seen).join("memory.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        )
        .unwrap();
        let fs = CgroupFs::new(root.path());
        let (mut relief, _fired) = Relief::new();
        relief.refresh("r1", Some(AT_ONCE), &desired, None, &fs);
        assert_eq!(relief.summary().unwrap().without_pressure, 1);
        std::fs::remove_file(root.path().join(&seen).join("memory.pressure")).unwrap();
        relief.refresh("r1", Some(AT_ONCE), &desired, None, &fs);
        assert_eq!(relief.summary().unwrap().without_pressure, 2);
        // Relief off: nothing to say.
        relief.refresh("r1", None, &desired, None, &fs);
        assert_eq!(relief.summary(), None);
    }
}
