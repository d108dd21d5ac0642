//! Reclaim's writes, off the agent's thread (issue 58). The kernel reclaims in the
//! context of the process that writes `memory.reclaim`: on the agent's only runtime
//! thread, a large step or slow writeback would hold back passes, status, relief and
//! `/healthz`. So a step is a job for a thread of its own, through a bounded queue,
//! at most one job per container at a time; the loop's tick only reads (three small
//! files a container) and folds in what finished.
//!
//! A job writes its step in parts (`nodemem_model::feedback::reclaim_parts`): each
//! part small enough that the kernel's worst overshoot stays above the container's
//! floor, memory.current read again after each, the job ended when the step is taken,
//! the headroom above the floor is used up, the kernel finds less than asked, or its
//! time budget ([`JOB_BUDGET`]) is spent.

use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::{Duration, Instant};

use nodemem_cgroup::reclaim::Reclaimed;
use nodemem_cgroup::{CgroupError, CgroupFs, CgroupPath};
use nodemem_model::feedback::reclaim::Sample;
use nodemem_model::feedback::reclaim_parts::next_part;

/// Jobs waiting at most: beyond, a due step waits for the next tick (and is counted
/// behind). One job per container is in flight at a time, so this is reached only
/// with more containers than this whose writes have not finished.
pub const QUEUE: usize = 64;
/// The time one job may spend writing its parts: a step not taken by then ends there
/// (what was taken is counted), so that one container's slow reclaim holds the
/// others' back by at most this.
pub const JOB_BUDGET: Duration = Duration::from_secs(1);

/// One step to write.
#[derive(Clone, Debug)]
pub struct Job {
    /// The container's cgroup, relative to the cgroup root.
    pub cgroup: CgroupPath,
    pub bytes: i64,
    /// The container's reading the step was computed from.
    pub before: Sample,
    pub numa_nodes: u32,
    /// What a reading after the job needs (`super::read`).
    pub swap: bool,
    pub queued: Instant,
    /// Find out first whether memory.reclaim takes `swappiness=` (`Done::swappiness`).
    pub probe_swappiness: bool,
    /// The revision's generation (`super::Reclaim`): a job of an earlier one is not
    /// counted under a later.
    pub generation: u64,
}

/// A job done.
#[derive(Debug)]
pub struct Done {
    pub cgroup: CgroupPath,
    pub before: Sample,
    /// The reading after the last part (`before` when none was written or the
    /// cgroup went).
    pub after: Sample,
    /// A write the kernel refused (other than finding less than asked).
    pub error: Option<CgroupError>,
    /// Parts written, and bytes they asked.
    pub parts: usize,
    pub asked: i64,
    /// From queueing to done.
    pub took: Duration,
    pub generation: u64,
    /// What the probe found (`Job::probe_swappiness`); None: not probed, or the probe's
    /// write failed for another reason.
    pub swappiness: Option<bool>,
}

/// Where jobs run: on a thread of their own (the agent), or at once where they are
/// sent (tests that step and read in one go).
pub enum Writer {
    Thread {
        jobs: SyncSender<Job>,
        done: Receiver<Done>,
    },
    Inline {
        fs: CgroupFs,
        done: Vec<Done>,
    },
}

impl Writer {
    /// A thread writing under `fs`, jobs queued up to [`QUEUE`]. The thread ends when
    /// the writer is dropped.
    pub fn thread(fs: CgroupFs) -> std::io::Result<Writer> {
        let (jobs, inbox) = mpsc::sync_channel::<Job>(QUEUE);
        let (outbox, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("reclaim-writer".into())
            .spawn(move || {
                for job in inbox {
                    if outbox.send(run(&fs, job)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Writer::Thread { jobs, done })
    }

    pub fn inline(fs: CgroupFs) -> Writer {
        Writer::Inline {
            fs,
            done: Vec::new(),
        }
    }

    /// Queues `job`; gives back its cgroup when the queue is full.
    pub fn send(&mut self, job: Job) -> Result<(), CgroupPath> {
        match self {
            Writer::Thread { jobs, .. } => jobs.try_send(job).map_err(|e| match e {
                TrySendError::Full(job) | TrySendError::Disconnected(job) => job.cgroup,
            }),
            Writer::Inline { fs, done } => {
                done.push(run(fs, job));
                Ok(())
            }
        }
    }

    /// The jobs done since the last call.
    pub fn finished(&mut self) -> Vec<Done> {
        match self {
            Writer::Thread { done, .. } => {
                let mut out = Vec::new();
                loop {
                    match done.try_recv() {
                        Ok(d) => out.push(d),
                        Err(TryRecvError::Empty | TryRecvError::Disconnected) => return out,
                    }
                }
            }
            Writer::Inline { done, .. } => std::mem::take(done),
        }
    }

    /// Waits up to `timeout` for the next job done (tests).
    #[cfg(test)]
    pub fn wait(&mut self, timeout: Duration) -> Option<Done> {
        match self {
            Writer::Thread { done, .. } => done.recv_timeout(timeout).ok(),
            Writer::Inline { done, .. } => done.pop(),
        }
    }
}

/// What a job needs of the kernel: the cgroup file system, or a stand-in in tests.
pub trait Kernel {
    fn reclaim(&self, cgroup: &CgroupPath, bytes: i64) -> Result<Reclaimed, CgroupError>;
    /// memory.current; None when it cannot be read (the cgroup went).
    fn current(&self, cgroup: &CgroupPath) -> Option<i64>;
}

impl Kernel for CgroupFs {
    fn reclaim(&self, cgroup: &CgroupPath, bytes: i64) -> Result<Reclaimed, CgroupError> {
        CgroupFs::reclaim(self, cgroup, bytes)
    }

    fn current(&self, cgroup: &CgroupPath) -> Option<i64> {
        self.read(cgroup, "memory.current")
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// Runs `job`: the probe where asked, the step part by part, the reading after.
fn run(fs: &CgroupFs, job: Job) -> Done {
    let swappiness = job
        .probe_swappiness
        .then(|| super::reading::takes_swappiness(fs, &job.cgroup))
        .flatten();
    let written = write_parts(fs, &job, Instant::now());
    // Counted from the reading after; if the cgroup went, nothing is counted taken.
    let after = if written.parts == 0 {
        job.before
    } else {
        super::reading::read(fs, &job.cgroup, job.before.at, job.before.floor, job.swap)
            .ok()
            .flatten()
            .unwrap_or(job.before)
    };
    Done {
        cgroup: job.cgroup,
        before: job.before,
        after,
        error: written.error,
        parts: written.parts,
        asked: written.asked,
        took: job.queued.elapsed(),
        generation: job.generation,
        swappiness,
    }
}

/// What [`write_parts`] wrote.
#[derive(Debug, Default)]
pub struct Written {
    pub parts: usize,
    pub asked: i64,
    pub error: Option<CgroupError>,
}

/// Writes `job`'s step in parts (`next_part`), memory.current read again after each:
/// until the step is taken, no part is safe above the floor, the kernel finds less
/// than asked or refuses, the cgroup goes, or [`JOB_BUDGET`] from `started` is spent.
pub fn write_parts(kernel: &impl Kernel, job: &Job, started: Instant) -> Written {
    let mut written = Written::default();
    let mut current = job.before.current;
    while let Some(part) = next_part(
        job.bytes - written.asked,
        current,
        job.before.floor,
        job.numa_nodes,
    ) {
        match kernel.reclaim(&job.cgroup, part) {
            Ok(found) => {
                written.parts += 1;
                written.asked += part;
                if found == Reclaimed::Partly {
                    break; // the kernel found less than asked: nothing more to find
                }
            }
            Err(e) => {
                written.error = Some(e);
                break;
            }
        }
        let Some(now) = kernel.current(&job.cgroup) else {
            break; // the cgroup went
        };
        current = now;
        if job.before.current - current >= job.bytes || started.elapsed() >= JOB_BUDGET {
            break;
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_model::feedback::reclaim_parts::{worst_taken, PAGE};
    use std::cell::{Cell, RefCell};

    const MI: i64 = 1 << 20;

    /// A kernel that takes the worst a write can (`worst_taken`), or less when asked
    /// (`takes`), records each part, and answers "less found" once memory.current
    /// would go below `exhausted`.
    struct WorstKernel {
        numa_nodes: u32,
        current: Cell<i64>,
        parts: RefCell<Vec<i64>>,
        exhausted: i64,
        refuse: bool,
    }

    impl Kernel for WorstKernel {
        fn reclaim(&self, _: &CgroupPath, bytes: i64) -> Result<Reclaimed, CgroupError> {
            if self.refuse {
                return Err(CgroupError::Io {
                    op: nodemem_cgroup::fs::Op::Write,
                    path: "memory.reclaim".into(),
                    value: None,
                    source: std::io::Error::from_raw_os_error(libc::EBUSY),
                    vanished: false,
                });
            }
            self.parts.borrow_mut().push(bytes);
            let after = self.current.get() - worst_taken(bytes, self.numa_nodes);
            if after < self.exhausted {
                self.current.set(self.exhausted);
                return Ok(Reclaimed::Partly);
            }
            self.current.set(after);
            Ok(Reclaimed::All)
        }

        fn current(&self, _: &CgroupPath) -> Option<i64> {
            Some(self.current.get())
        }
    }

    fn job(bytes: i64, current: i64, floor: i64, numa_nodes: u32) -> Job {
        Job {
            cgroup: CgroupPath::new("kubepods/burstable/pod1/c1").unwrap(),
            bytes,
            before: Sample {
                at: 0,
                stall_total_us: 0,
                current,
                inactive_file: current,
                active_file: 0,
                anon: 0,
                refaults: 0,
                floor,
                swap: false,
            },
            numa_nodes,
            swap: false,
            queued: Instant::now(),
            probe_swappiness: false,
            generation: 0,
        }
    }

    fn kernel(current: i64, numa_nodes: u32) -> WorstKernel {
        WorstKernel {
            numa_nodes,
            current: Cell::new(current),
            parts: RefCell::new(Vec::new()),
            exhausted: 0,
            refuse: false,
        }
    }

    /// The case and around it: steps of up to all there is, a kernel that
    /// overshoots the worst it can on 1 to 8 NUMA nodes, containers from just above
    /// their request to far above it: memory.current never goes below the request.
    #[test]
    fn a_step_written_in_parts_never_takes_a_container_below_its_request() {
        let floor = 64 * MI;
        for nodes in 1..=8u32 {
            for above in [0, PAGE, MI, 3 * MI, 10 * MI, 37 * MI, 100 * MI, 1000 * MI] {
                for step in [PAGE, MI, 50 * MI, 400 * MI, i64::MAX / 2] {
                    let k = kernel(floor + above, nodes);
                    let w =
                        write_parts(&k, &job(step, floor + above, floor, nodes), Instant::now());
                    assert!(
                        k.current.get() >= floor,
                        "{nodes} nodes, {above} above, step {step}: {} after {:?}",
                        k.current.get(),
                        k.parts.borrow()
                    );
                    assert_eq!(w.parts, k.parts.borrow().len());
                    assert!(w.asked <= step.max(0), "never more asked than the step");
                }
            }
        }
    }

    #[test]
    fn far_above_its_request_a_step_is_taken_in_parts_of_at_most_8_mib() {
        let k = kernel(4096 * MI, 2);
        let w = write_parts(&k, &job(50 * MI, 4096 * MI, 64 * MI, 2), Instant::now());
        let parts = k.parts.borrow();
        assert!(parts.iter().all(|p| *p <= 8 * MI), "{parts:?}");
        // The worst kernel takes twice a part and more on two nodes: the step is
        // taken after the fewest parts whose worst reaches 50 MiB.
        assert!(4096 * MI - k.current.get() >= 50 * MI, "{parts:?}");
        assert_eq!(w.parts, parts.len());
        assert!(w.error.is_none());
    }

    #[test]
    fn less_found_a_refusal_or_the_budget_ends_the_step() {
        let mut k = kernel(4096 * MI, 1);
        k.exhausted = 4090 * MI;
        let w = write_parts(&k, &job(100 * MI, 4096 * MI, 0, 1), Instant::now());
        assert_eq!(w.parts, 1, "nothing more to find after less found");

        let mut k = kernel(4096 * MI, 1);
        k.refuse = true;
        let w = write_parts(&k, &job(100 * MI, 4096 * MI, 0, 1), Instant::now());
        assert_eq!((w.parts, w.asked), (0, 0));
        assert!(w.error.is_some());

        let k = kernel(4096 * MI, 1);
        let spent = Instant::now() - JOB_BUDGET;
        let w = write_parts(&k, &job(100 * MI, 4096 * MI, 0, 1), spent);
        assert_eq!(w.parts, 1, "one part, then the budget is spent");
    }
}
