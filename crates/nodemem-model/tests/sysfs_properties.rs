//! Property tests of the sysfs parsers the agent reads NUMA capacity with (issue 18:
//! fuzzing on the stable toolchain): a node's `meminfo`, its hugepage directories'
//! names and their `nr_hugepages`. Any text gives a value or a `SysfsError`, never a
//! panic; every capacity is a byte count no smaller than zero; what the kernel prints
//! round-trips.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use nodemem_model::numa::sysfs::{hugepage_resource, node_capacity, parse_meminfo_total};
use proptest::prelude::*;

/// Text biased towards meminfo's alphabet, mixed with arbitrary characters.
fn meminfo_like() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::string::string_regex(
            "((Node|MemTotal:|MemFree:|kB|MB|-|[0-9]{1,21}| +|\n|\t|\u{0}|é)){0,24}"
        )
        .unwrap(),
        (any::<i64>(), "(kB|MB|)").prop_map(|(n, unit)| format!("Node 0 MemTotal: {n} {unit}\n")),
    ]
}

/// Hugepage directory names and counts, biased towards the kernel's form.
fn hugepages() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop_oneof![
        any::<String>(),
        any::<i64>().prop_map(|kb| format!("hugepages-{kb}kB")),
        Just("hugepages-2048kB".to_string()),
        Just("hugepages-1048576kB".to_string()),
    ];
    let count = prop_oneof![any::<String>(), any::<i64>().prop_map(|n| format!("{n}\n")),];
    proptest::collection::vec((name, count), 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn no_meminfo_and_no_hugepage_pool_makes_a_panic(text in meminfo_like(), pools in hugepages()) {
        if let Ok(total) = parse_meminfo_total(&text) {
            prop_assert!(total >= 0 && total % 1024 == 0, "{total}");
        }
        let borrowed: Vec<(&str, &str)> = pools.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        match node_capacity(&text, &borrowed) {
            Ok(capacity) => {
                prop_assert!(capacity.contains_key("memory"));
                for (kind, bytes) in &capacity {
                    prop_assert!(*bytes >= 0, "{kind}: {bytes}");
                }
            }
            // Every error has a stable reason code and a message.
            Err(e) => prop_assert!(!e.code().is_empty() && !e.to_string().is_empty()),
        }
    }

    #[test]
    fn meminfo_as_the_kernel_prints_it(id in 0u32..1024, kb in 0i64..i64::MAX / 1024) {
        let text = format!("Node {id} MemTotal:       {kb} kB\nNode {id} MemFree:        1 kB\n");
        prop_assert_eq!(parse_meminfo_total(&text), Ok(kb * 1024));
    }

    #[test]
    fn hugepage_directories_as_the_kernel_names_them(kb in 1i64..(1 << 40)) {
        let (name, bytes) = hugepage_resource(&format!("hugepages-{kb}kB")).unwrap();
        prop_assert_eq!(bytes, kb * 1024);
        // The resource name says the same size in the largest whole unit.
        let said = if let Some(gi) = name.strip_prefix("hugepages-").and_then(|s| s.strip_suffix("Gi")) {
            gi.parse::<i64>().unwrap() << 30
        } else if let Some(mi) = name.strip_prefix("hugepages-").and_then(|s| s.strip_suffix("Mi")) {
            mi.parse::<i64>().unwrap() << 20
        } else {
            name.strip_prefix("hugepages-").unwrap().strip_suffix("Ki").unwrap().parse::<i64>().unwrap() << 10
        };
        prop_assert_eq!(said, bytes);
    }
}

/// Found by reading the arithmetic the properties above exercise: a MemTotal no kernel
/// prints (negative) minus a hugepage pool overflowed (a panic in debug builds, a wrap
/// in release). A negative MemTotal is now refused, like any other that is not a count.
#[test]
fn a_negative_mem_total_is_refused_not_overflowed() {
    let text = "Node 0 MemTotal: -9007199254740992 kB\n";
    assert!(parse_meminfo_total(text).is_err());
    let result = std::panic::catch_unwind(|| node_capacity(text, &[("hugepages-2048kB", "1\n")]));
    assert!(matches!(result, Ok(Err(_))), "{result:?}");
}
