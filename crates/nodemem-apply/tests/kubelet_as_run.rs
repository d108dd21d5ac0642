//! What nodemem reads of the kubelet, printed as the kubelet's `/configz` prints the
//! configuration it runs (`KubeletSettings::as_run`): the defaults of each version
//! where the configuration names nothing, the named values over them. The real node
//! holds the same view against the kubelet's own `/configz` (issue 58).

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::fs;
use std::path::Path;

use nodemem_apply::kubelet::{KubeletFiles, OwnDropIn};
use nodemem_model::kubelet::version::KubeletVersion;
use serde_json::json;

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn v(minor: u32) -> KubeletVersion {
    KubeletVersion::v1(minor)
}

#[test]
fn a_file_that_names_nothing_runs_each_versions_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    write(&config, "{}\n");
    let read = KubeletFiles::given(config, None)
        .read(OwnDropIn::OnDisk)
        .unwrap();
    let threshold = json!({ "memory.available": (100i64 << 20).to_string() });
    // v1.35: no memoryReservationPolicy field; the factor defaulted to 0.9.
    assert_eq!(
        read.as_run(v(35)),
        json!({
            "memoryThrottlingFactor": 0.9,
            "memoryManagerPolicy": "None",
            "cgroupDriver": "cgroupfs",
            "evictionHard": threshold,
        })
    );
    // v1.36: the reservation policy defaulted to None.
    assert_eq!(
        read.as_run(v(36)),
        json!({
            "memoryThrottlingFactor": 0.9,
            "memoryReservationPolicy": "None",
            "memoryManagerPolicy": "None",
            "cgroupDriver": "cgroupfs",
            "evictionHard": threshold,
        })
    );
    // v1.37: the factor is optional and not defaulted.
    assert_eq!(
        read.as_run(v(37)),
        json!({
            "memoryReservationPolicy": "None",
            "memoryManagerPolicy": "None",
            "cgroupDriver": "cgroupfs",
            "evictionHard": threshold,
        })
    );
}

#[test]
fn what_the_file_drop_ins_and_flags_name_wins_over_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    write(
        &config,
        "featureGates: {MemoryQoS: true}\nmemoryThrottlingFactor: 0.7\ncgroupDriver: systemd\nkubeReserved: {memory: 256Mi}\nevictionHard: {memory.available: 5%}\n",
    );
    let dropins = dir.path().join("conf.d");
    write(
        &dropins.join("10-site.conf"),
        "{\"apiVersion\": \"kubelet.config.k8s.io/v1beta1\", \"kind\": \"KubeletConfiguration\", \"memoryReservationPolicy\": \"TieredReservation\", \"systemReserved\": {\"memory\": \"1Gi\"}, \"memoryManagerPolicy\": \"Static\", \"reservedMemory\": [{\"numaNode\": 0, \"limits\": {\"memory\": \"1380Mi\"}}]}\n",
    );
    let read = KubeletFiles::given(config, Some(dropins))
        .read(OwnDropIn::OnDisk)
        .unwrap();
    assert_eq!(
        read.as_run(v(37)),
        json!({
            "featureGates": {"MemoryQoS": true},
            "memoryThrottlingFactor": 0.7,
            "memoryReservationPolicy": "TieredReservation",
            "memoryManagerPolicy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1380Mi"}}],
            "cgroupDriver": "systemd",
            "kubeReserved": {"memory": "268435456"},
            "systemReserved": {"memory": "1073741824"},
            "evictionHard": {"memory.available": "5%"},
        })
    );
}

#[test]
fn a_null_factor_is_the_default_again_and_no_threshold_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    write(
        &config,
        "memoryThrottlingFactor: null\nevictionHard: {nodefs.available: 10%}\nreservedMemory: []\n",
    );
    let read = KubeletFiles::given(config, None)
        .read(OwnDropIn::OnDisk)
        .unwrap();
    assert_eq!(
        read.as_run(v(36)),
        json!({
            "memoryThrottlingFactor": 0.9,
            "memoryReservationPolicy": "None",
            "memoryManagerPolicy": "None",
            "cgroupDriver": "cgroupfs",
        }),
        "an evictionHard without memory.available sets no memory threshold"
    );
}
