//! Every parser on good kernel text (as the 6.1 kernel prints it) and on malformed text,
//! each malformed case with its exact message.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::collections::BTreeMap;

use nodemem_cgroup::parse::*;

#[test]
fn good_kernel_text() {
    assert_eq!(memory_value("memory.high", "max\n"), Ok(MemoryValue::Max));
    assert_eq!(
        memory_value("memory.min", "16777216\n"),
        Ok(MemoryValue::Bytes(16 << 20))
    );
    assert_eq!(memory_value("memory.low", "0"), Ok(MemoryValue::Bytes(0)));
    let events = memory_events(
        "memory.events",
        "low 1\nhigh 27\nmax 3\noom 0\noom_kill 2\noom_group_kill 0\n",
    )
    .unwrap();
    assert_eq!(
        events,
        MemoryEvents {
            low: 1,
            high: 27,
            max: 3,
            oom: 0,
            oom_kill: 2,
            oom_group_kill: 0
        }
    );
    // Before 5.17 there is no oom_group_kill; newer kernels may add keys.
    let old = memory_events(
        "memory.events",
        "low 0\nhigh 1\nmax 0\noom 0\noom_kill 0\nfuture 9\n",
    )
    .unwrap();
    assert_eq!(old.high, 1);
    let p = pressure(
        "memory.pressure",
        "some avg10=1.50 avg60=0.25 avg300=0.00 total=12345\nfull avg10=0.75 avg60=0.00 avg300=0.00 total=678\n",
    )
    .unwrap();
    assert_eq!(p.some.avg10, 1.5);
    assert_eq!(p.some.total_us, 12345);
    assert_eq!(p.full.unwrap().avg10, 0.75);
    assert_eq!(p.full.unwrap().total_us, 678);
    assert_eq!(
        range_list("cpuset.mems", "0-1\n")
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(range_list("cpuset.mems", "0,2-3\n").unwrap().len(), 3);
    assert!(range_list("cpuset.mems", "\n").unwrap().is_empty());
    assert_eq!(
        render_range_list(&range_list("x", "0-2,4,6-7").unwrap()),
        "0-2,4,6-7"
    );
    assert_eq!(render_range_list(&Default::default()), "");
    let c = controllers(
        "cgroup.controllers",
        "cpuset cpu io memory hugetlb pids rdma misc\n",
    )
    .unwrap();
    assert!(c.contains("memory") && c.contains("cpuset") && c.len() == 8);
    assert!(controllers("cgroup.subtree_control", "\n")
        .unwrap()
        .is_empty());
}

#[test]
fn malformed_text_is_refused_with_exact_messages() {
    let cases: Vec<(Result<(), ParseError>, &str)> = vec![
        (memory_value("memory.high", "12k").map(drop), r#"memory.high: not a byte count or "max": "12k""#),
        (memory_value("memory.min", "").map(drop), r#"memory.min: not a byte count or "max": """#),
        (memory_value("memory.min", "-1").map(drop), r#"memory.min: not a byte count or "max": "-1""#),
        (memory_value("memory.low", "MAX").map(drop), r#"memory.low: not a byte count or "max": "MAX""#),
        (memory_value("memory.max", "99999999999999999999999").map(drop), r#"memory.max: not a byte count or "max": "99999999999999999999999""#),
        (memory_value("memory.min", "1 2").map(drop), r#"memory.min: not a byte count or "max": "1 2""#),
        (memory_events("memory.events", "low 0\nhigh\n").map(drop), r#"memory.events: not a "<key> <count>" line: "high""#),
        (memory_events("memory.events", "low 0\nhigh x\n").map(drop), r#"memory.events: not a non-negative count: "x""#),
        (memory_events("memory.events", "low 0\nlow 1\n").map(drop), r#"memory.events: key repeated: "low""#),
        (memory_events("memory.events", "low 0\nhigh 0\nmax 0\noom 0\n").map(drop), r#"memory.events: key missing: "oom_kill""#),
        (memory_events("memory.events", "low 0 1\n").map(drop), r#"memory.events: not a "<key> <count>" line: "low 0 1""#),
        (memory_events("memory.events", " 5\n").map(drop), r#"memory.events: not a "<key> <count>" line: " 5""#),
        (pressure("memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00\n").map(drop), r#"memory.pressure: not a "some|full avg10=.. avg60=.. avg300=.. total=.." line: "some avg10=0.00 avg60=0.00 avg300=0.00""#),
        (pressure("memory.pressure", "half avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").map(drop), r#"memory.pressure: not a "some|full avg10=.. avg60=.. avg300=.. total=.." line: "half avg10=0.00 avg60=0.00 avg300=0.00 total=0""#),
        (pressure("memory.pressure", "some avg60=0.00 avg10=0.00 avg300=0.00 total=0\n").map(drop), r#"memory.pressure: not the expected avg10=, avg60=, avg300=, total= field: "avg60=0.00""#),
        (pressure("memory.pressure", "some avg10=1x avg60=0.00 avg300=0.00 total=0\n").map(drop), r#"memory.pressure: not a percentage from 0 to 100: "1x""#),
        (pressure("memory.pressure", "some avg10=100.01 avg60=0.00 avg300=0.00 total=0\n").map(drop), r#"memory.pressure: not a percentage from 0 to 100: "100.01""#),
        (pressure("memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=-4\n").map(drop), r#"memory.pressure: not a non-negative count: "-4""#),
        (pressure("memory.pressure", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").map(drop), r#"memory.pressure: key missing: "some""#),
        (pressure("memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").map(drop), r#"memory.pressure: key repeated: "some""#),
        (range_list("cpuset.mems", "3-1").map(drop), r#"cpuset.mems: not a NUMA node or CPU range like 0, 0-3 or 0,2-3: "3-1""#),
        (range_list("cpuset.mems", "0,,1").map(drop), r#"cpuset.mems: not a NUMA node or CPU range like 0, 0-3 or 0,2-3: """#),
        (range_list("cpuset.mems", "1-").map(drop), r#"cpuset.mems: not a NUMA node or CPU range like 0, 0-3 or 0,2-3: "1-""#),
        (range_list("cpuset.mems.effective", "a").map(drop), r#"cpuset.mems.effective: not a NUMA node or CPU range like 0, 0-3 or 0,2-3: "a""#),
        (range_list("cpuset.mems", "0-99999").map(drop), r#"cpuset.mems: not a NUMA node or CPU range like 0, 0-3 or 0,2-3: "0-99999""#),
        (range_list("cpuset.mems", " 0").map(drop), r#"cpuset.mems: not a NUMA node or CPU range like 0, 0-3 or 0,2-3: " 0""#),
        (controllers("cgroup.controllers", "cpuset  memory").map(drop), r#"cgroup.controllers: not a controller name: """#),
        (controllers("cgroup.subtree_control", "+memory").map(drop), r#"cgroup.subtree_control: not a controller name: "+memory""#),
        (controllers("cgroup.controllers", "memory memory").map(drop), r#"cgroup.controllers: key repeated: "memory""#),
        (controllers("cgroup.controllers", "Memory").map(drop), r#"cgroup.controllers: not a controller name: "Memory""#),
    ];
    assert!(cases.len() >= 20);
    let mut wrong = Vec::new();
    for (i, (result, expected)) in cases.iter().enumerate() {
        match result {
            Err(e) if e.to_string() == *expected => {}
            other => wrong.push(format!("case {i}: got {other:?}, expected {expected}")),
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn memory_stat_and_the_working_set() {
    // The head of a 6.1 kernel's memory.stat.
    let text = "anon 8425472\nfile 104857600\nkernel 524288\nactive_anon 8388608\ninactive_anon 36864\nactive_file 20971520\ninactive_file 83886080\npgfault 4521\n";
    let stat = memory_stat("memory.stat", text).unwrap();
    assert_eq!(stat["inactive_file"], 83886080);
    // 110 MiB charged, 80 MiB of it inactive page cache: 30 MiB working set.
    assert_eq!(working_set("memory.stat", 115343360, &stat), Ok(31457280));
    // Never below zero (the counters are read one after the other).
    assert_eq!(working_set("memory.stat", 1, &stat), Ok(0));
    let e = working_set("memory.stat", 1, &BTreeMap::new()).unwrap_err();
    assert_eq!(e.to_string(), "memory.stat: key missing: \"inactive_file\"");
    assert!(memory_stat("memory.stat", "anon x\n").is_err());
}

#[test]
fn refaults_from_either_kernel_generation() {
    // Linux 5.9 and later split them by LRU; before, one counter; a kernel with
    // neither counts none.
    let split = memory_stat(
        "memory.stat",
        "workingset_refault_anon 7\nworkingset_refault_file 40\nworkingset_activate_file 3\n",
    )
    .unwrap();
    assert_eq!(refaults(&split), Some(47));
    let one = memory_stat(
        "memory.stat",
        "workingset_refault 12\nworkingset_activate 1\n",
    )
    .unwrap();
    assert_eq!(refaults(&one), Some(12));
    let half = memory_stat("memory.stat", "workingset_refault_file 40\n").unwrap();
    assert_eq!(refaults(&half), None, "half a split pair is no count");
    assert_eq!(refaults(&BTreeMap::new()), None);
}
