//! The kubelet as files: its layered configuration, nodemem's drop-in, the Memory
//! Manager state file, and the kubelet's start time from a procfs tree.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::fs;
use std::path::Path;

use nodemem_apply::kubelet::{
    kubelet_started_at, remove_memory_manager_state, KubeletFiles, OwnDropIn,
};
use nodemem_model::kubelet::eviction::MemoryEviction;
use nodemem_model::kubelet::writes::Named;
use nodemem_model::quantity::Quantity;

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn q(s: &str) -> Option<Quantity> {
    Some(Quantity::parse(s).unwrap())
}

#[test]
fn the_kubelets_own_memory_settings_are_read_with_its_drop_ins() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let files = KubeletFiles::given(config.clone(), None);
    let err = files.read(OwnDropIn::OnDisk).unwrap_err();
    assert_eq!(
        err.reason(),
        "KubeletConfigUnreadable",
        "a missing file is said, not assumed: {err}"
    );
    assert!(err.to_string().contains("config.yaml"), "{err}");
    write(&config, "{}\n");
    let bare = files.read(OwnDropIn::OnDisk).unwrap();
    assert_eq!(
        bare.reserved.eviction_hard,
        q("100Mi"),
        "a file without evictionHard gets the kubelet's default"
    );
    assert_eq!(bare.origin.sources(), [config.display().to_string()]);
    write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  MemoryQoS: true\ncgroupDriver: systemd\nkubeReserved: {cpu: 100m, memory: 1Gi}\nevictionHard: {nodefs.available: 10%}\n",
    );
    let s = files.read(OwnDropIn::OnDisk).unwrap();
    assert!(s.qos.gate == Some(true) && !s.static_memory_manager());
    assert_eq!(s.qos.throttling_factor, Named::Absent);
    assert_eq!(s.reserved.kube_reserved, q("1Gi"));
    assert_eq!(
        s.reserved.eviction_hard,
        q("0"),
        "a map without memory.available sets no memory threshold"
    );
    // A drop-in turns the gate off again, sets the Static memory manager and merges
    // into evictionHard.
    let dropins = dir.path().join("conf.d");
    let files = KubeletFiles::given(config.clone(), Some(dropins.clone()));
    write(
        &dropins.join("50-memory.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryManagerPolicy: Static\nfeatureGates: {MemoryQoS: false}\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\nevictionHard: {memory.available: 5%}\n",
    );
    write(&dropins.join("README"), "ignored: not a .conf file\n");
    let s = files.read(OwnDropIn::OnDisk).unwrap();
    assert!(s.qos.gate == Some(false) && s.static_memory_manager());
    assert_eq!(s.origin.sources().len(), 2);
    assert_eq!(
        s.reserved.eviction_hard, None,
        "a percentage cannot be summed here"
    );
    assert_eq!(s.memory_eviction, MemoryEviction::Fraction(0.05));
    assert_eq!(
        s.hard_eviction_memory(Some(8 << 30)),
        Some(429_496_736),
        "resolved against capacity as the kubelet does"
    );
    assert_eq!(s.hard_eviction_memory(None), None);
    let (policy, reserved) = s.memory_manager();
    assert_eq!(policy, "Static");
    assert_eq!(
        reserved.unwrap(),
        &serde_json::json!([{"numaNode": 0, "limits": {"memory": "1Gi"}}])
    );

    // nodemem's own drop-in: on disk, left out, or as it would be written.
    files
        .write_dropin("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryManagerPolicy: None\n")
        .unwrap();
    assert_eq!(
        files.read(OwnDropIn::OnDisk).unwrap().memory_manager().0,
        "None"
    );
    assert_eq!(
        files.read(OwnDropIn::Without).unwrap().memory_manager().0,
        "Static"
    );
    assert_eq!(
        files
            .read(OwnDropIn::As("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates: {MemoryQoS: true}\n"))
            .unwrap()
            .qos
            .gate,
        Some(true)
    );
    assert_eq!(
        files.current_dropin().unwrap().as_deref(),
        Some("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryManagerPolicy: None\n")
    );
    assert!(
        !dropins.join(".~nodemem.conf.tmp").exists(),
        "the temporary file is renamed into place"
    );
    assert!(files.remove_dropin().unwrap());
    assert!(!files.remove_dropin().unwrap(), "already gone");
    assert_eq!(files.current_dropin().unwrap(), None);

    write(
        &dropins.join("60-bad.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates: [MemoryQoS]\n",
    );
    let err = files.read(OwnDropIn::OnDisk).unwrap_err().to_string();
    assert!(
        err.contains("60-bad.conf: not a KubeletConfiguration: invalid type"),
        "{err}"
    );
    write(&dropins.join("60-bad.conf"), "maxPods: 10\n");
    let err = files.read(OwnDropIn::OnDisk).unwrap_err().to_string();
    assert!(
        err.contains("60-bad.conf: not a KubeletConfiguration: no apiVersion/kind"),
        "a drop-in the kubelet would refuse to start with: {err}"
    );
}

#[test]
fn without_a_config_dir_there_is_nowhere_to_write() {
    let files = KubeletFiles::given("/nonexistent/config.yaml".into(), None);
    assert_eq!(
        files.write_dropin("x").unwrap_err().to_string(),
        "enforcement: Kubelet needs the kubelet's --config-dir: the kubelet (its files given to the agent) runs without one, so a drop-in would not be read"
    );
}

#[test]
fn the_memory_manager_state_file_is_removed_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("memory_manager_state");
    assert!(!remove_memory_manager_state(&state).unwrap());
    fs::write(&state, "{}").unwrap();
    assert!(remove_memory_manager_state(&state).unwrap());
    assert!(!state.exists());
}

#[test]
fn the_kubelets_start_is_read_from_procfs() {
    let proc = tempfile::tempdir().unwrap();
    assert_eq!(kubelet_started_at(proc.path()), None, "no procfs");
    write(
        &proc.path().join("stat"),
        "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n",
    );
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let stat = |start: u64| {
        format!("{{pid}} (kubelet) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n")
    };
    write(&proc.path().join("12/comm"), "containerd\n");
    write(&proc.path().join("12/stat"), &stat(5 * ticks));
    assert_eq!(kubelet_started_at(proc.path()), None, "no kubelet running");
    let mnt = |pid: &str, ns: &str| {
        fs::create_dir_all(proc.path().join(pid).join("ns")).unwrap();
        std::os::unix::fs::symlink(ns, proc.path().join(pid).join("ns/mnt")).unwrap();
    };
    let host = "mnt:[4026531841]";
    mnt("1", host);
    write(&proc.path().join("77/comm"), "kubelet\n");
    write(&proc.path().join("77/stat"), &stat(60 * ticks));
    write(
        &proc.path().join("77/cgroup"),
        "0::/system.slice/kubelet.service\n",
    );
    mnt("77", host);
    // A newer process named kubelet in a container's mount namespace is not the host's.
    write(&proc.path().join("78/comm"), "kubelet\n");
    write(&proc.path().join("78/stat"), &stat(90 * ticks));
    write(
        &proc.path().join("78/cgroup"),
        "0::/system.slice/kubelet.service\n",
    );
    mnt("78", "mnt:[4026532777]");
    let at = |s: u64| Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s));
    assert_eq!(
        kubelet_started_at(proc.path()),
        at(1_700_000_060),
        "the host's kubelet, 60 s after boot, not the container's"
    );
    // Restarted: the old process gone, a new one of the host's.
    fs::remove_dir_all(proc.path().join("77")).unwrap();
    write(&proc.path().join("79/comm"), "kubelet\n");
    write(&proc.path().join("79/stat"), &stat(120 * ticks));
    write(
        &proc.path().join("79/cgroup"),
        "0::/system.slice/kubelet.service\n",
    );
    mnt("79", host);
    assert_eq!(kubelet_started_at(proc.path()), at(1_700_000_120));
}

/// v1.37's fields as the kubelet merges them: a later drop-in's value wins, its
/// `null` removes what an earlier file named (the kubelet then defaults it again).
#[test]
fn memory_qos_fields_merge_as_the_kubelets_drop_ins_do() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let files = KubeletFiles::given(config.clone(), Some(dir.path().join("conf.d")));
    write(
        &config,
        "memoryThrottlingFactor: 0.8\nmemoryReservationPolicy: TieredReservation\n",
    );
    let s = files.read(OwnDropIn::OnDisk).unwrap();
    assert_eq!(s.qos.throttling_factor, Named::Value(0.8));
    assert_eq!(
        s.qos.reservation_policy.as_deref(),
        Some("TieredReservation")
    );
    assert_eq!(s.qos.gate, None, "not named: the version's default");
    write(
        &dir.path().join("conf.d/10-a.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryThrottlingFactor: 0.7\n",
    );
    assert_eq!(
        files.read(OwnDropIn::OnDisk).unwrap().qos.throttling_factor,
        Named::Value(0.7)
    );
    write(
        &dir.path().join("conf.d/20-b.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryThrottlingFactor: null\n",
    );
    assert_eq!(
        files.read(OwnDropIn::OnDisk).unwrap().qos.throttling_factor,
        Named::Absent,
        "the merge patch removes it: defaulted again"
    );
    write(
        &dir.path().join("conf.d/30-c.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryThrottlingFactor: 0.6\n",
    );
    write(
        &dir.path().join("conf.d/40-d.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 10\n",
    );
    assert_eq!(
        files.read(OwnDropIn::OnDisk).unwrap().qos.throttling_factor,
        Named::Value(0.6),
        "a drop-in that does not name it leaves it"
    );
}

/// nodemem's drop-in under its old name (`99-nodemem.conf`, until 2026-11-30) is still
/// its own, and moves to `~nodemem.conf`, which sorts after a site's drop-ins (issue
/// 58): renamed in place where no other drop-in sorts between the two names (the
/// kubelet runs the same files in the same order), otherwise written anew under the
/// new name with the old one removed (the kubelet must restart to read it last).
#[test]
fn the_drop_in_moves_off_its_old_name_without_changing_what_the_kubelet_runs() {
    use nodemem_model::node::kubelet_dropin::{DROPIN_FILE, LEGACY_DROPIN_FILES};
    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    assert_eq!(DROPIN_FILE, "~nodemem.conf");
    for site in [
        "zz-site.conf",
        "kubelet-site.conf",
        "99-other.conf",
        "zz/late.conf",
    ] {
        assert!(
            site < DROPIN_FILE,
            "{site} sorts before nodemem's drop-in, whose fields win"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    write(&config, HEADER);
    let dropins = dir.path().join("conf.d");
    let files = KubeletFiles::given(config.clone(), Some(dropins.clone()));
    let legacy = dropins.join(LEGACY_DROPIN_FILES[0]);
    let ours = format!("{HEADER}memoryThrottlingFactor: 0.8\n");

    // Alone under its old name, with only earlier drop-ins: moved, the same text.
    write(
        &dropins.join("10-site.conf"),
        &format!("{HEADER}memoryThrottlingFactor: 0.6\n"),
    );
    write(&legacy, &ours);
    assert_eq!(
        files.read(OwnDropIn::OnDisk).unwrap().qos.throttling_factor,
        Named::Value(0.8),
        "on disk, the old name is read where it sorts, as the kubelet reads it"
    );
    assert_eq!(
        files
            .read(OwnDropIn::Without)
            .unwrap()
            .qos
            .throttling_factor,
        Named::Value(0.6),
        "without nodemem's own, the old name is nodemem's too"
    );
    assert_eq!(
        files.current_dropin().unwrap().as_deref(),
        Some(ours.as_str())
    );
    assert!(
        !legacy.exists() && dropins.join(DROPIN_FILE).exists(),
        "moved"
    );

    // Back under its old name with a site's drop-in between the names: not current
    // (the kubelet runs the site's value now; nodemem's wins only after a restart).
    fs::rename(dropins.join(DROPIN_FILE), &legacy).unwrap();
    write(
        &dropins.join("zz-site.conf"),
        &format!("{HEADER}memoryThrottlingFactor: 0.5\n"),
    );
    assert_eq!(
        files.read(OwnDropIn::OnDisk).unwrap().qos.throttling_factor,
        Named::Value(0.5),
        "the kubelet runs zz-site.conf's value over the old name's"
    );
    assert_eq!(files.current_dropin().unwrap(), None, "not moved");
    assert!(legacy.exists());
    assert_eq!(
        files
            .read(OwnDropIn::As(&ours))
            .unwrap()
            .qos
            .throttling_factor,
        Named::Value(0.8),
        "as it would be written: after zz-site.conf, the old name gone"
    );
    assert!(
        files.overrides_of(&ours).unwrap().is_empty(),
        "zz-site.conf sorts before"
    );
    files.write_dropin(&ours).unwrap();
    assert!(
        !legacy.exists(),
        "the old name removed once the new one is written"
    );
    assert_eq!(
        files.current_dropin().unwrap().as_deref(),
        Some(ours.as_str())
    );
    assert_eq!(
        files.read(OwnDropIn::OnDisk).unwrap().qos.throttling_factor,
        Named::Value(0.8)
    );

    // Given back: under either name.
    write(&legacy, &ours);
    assert!(files.remove_dropin().unwrap());
    assert!(!legacy.exists() && !dropins.join(DROPIN_FILE).exists());
    assert!(!files.remove_dropin().unwrap(), "already gone");
}
