//! Property tests of the kernel-format parsers (issue 18: fuzzing on the stable
//! toolchain). Any text at all, including bytes no kernel prints, gives a value or a
//! ParseError naming the file, never a panic; what the kernel prints round-trips.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::collections::BTreeSet;

use nodemem_cgroup::parse::*;
use proptest::prelude::*;

/// Text biased towards the kernel's alphabet (digits, separators, key words) so that
/// cases get past the first token, mixed with arbitrary characters.
fn kernel_like_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::string::string_regex(
            "((some|full|low|high|max|oom|oom_kill|avg10=|avg60=|total=|[0-9]{1,22}|[.,: =-]|\n|\t|\u{0}|é)){0,40}"
        )
        .unwrap(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn no_text_makes_a_parser_panic(text in kernel_like_text()) {
        for (file, error) in [
            ("memory.min", memory_value("memory.min", &text).err()),
            ("memory.events", memory_events("memory.events", &text).err()),
            ("memory.pressure", pressure("memory.pressure", &text).err()),
            ("cpuset.mems", range_list("cpuset.mems", &text).err()),
            ("cgroup.controllers", controllers("cgroup.controllers", &text).err()),
            ("memory.stat", memory_stat("memory.stat", &text).err()),
        ] {
            // The error names the file it came from, in its message too.
            if let Some(e) = error {
                prop_assert_eq!(e.file.as_str(), file);
                prop_assert!(e.to_string().contains(file), "{}", e);
            }
        }
    }

    #[test]
    fn byte_counts_and_max_round_trip(n in any::<u64>(), newline in any::<bool>()) {
        let nl = if newline { "\n" } else { "" };
        prop_assert_eq!(memory_value("memory.high", &format!("{n}{nl}")), Ok(MemoryValue::Bytes(n)));
        prop_assert_eq!(memory_value("memory.high", &format!("max{nl}")), Ok(MemoryValue::Max));
    }

    #[test]
    fn memory_events_as_the_kernel_prints_them(v in proptest::array::uniform6(any::<u64>())) {
        let text = format!(
            "low {}\nhigh {}\nmax {}\noom {}\noom_kill {}\noom_group_kill {}\n",
            v[0], v[1], v[2], v[3], v[4], v[5]
        );
        let e = memory_events("memory.events", &text).unwrap();
        prop_assert_eq!([e.low, e.high, e.max, e.oom, e.oom_kill, e.oom_group_kill], v);
    }

    #[test]
    fn pressure_as_the_kernel_prints_it(
        avg in proptest::array::uniform6(0u32..=10000),
        totals in proptest::array::uniform2(any::<u64>()),
    ) {
        let line = |kind: &str, a: &[u32], total: u64| {
            format!(
                "{kind} avg10={}.{:02} avg60={}.{:02} avg300={}.{:02} total={total}\n",
                a[0] / 100, a[0] % 100, a[1] / 100, a[1] % 100, a[2] / 100, a[2] % 100
            )
        };
        let text = line("some", &avg[..3], totals[0]) + &line("full", &avg[3..], totals[1]);
        let p = pressure("memory.pressure", &text).unwrap();
        let full = p.full.unwrap();
        prop_assert_eq!(p.some.total_us, totals[0]);
        prop_assert_eq!(full.total_us, totals[1]);
        prop_assert!((p.some.avg10 - f64::from(avg[0]) / 100.0).abs() < 1e-9);
        prop_assert!((full.avg300 - f64::from(avg[5]) / 100.0).abs() < 1e-9);
    }

    #[test]
    fn range_lists_round_trip(set in proptest::collection::btree_set(0u32..4096, 0..64)) {
        let text = render_range_list(&set);
        prop_assert_eq!(range_list("cpuset.mems", &text), Ok(set.clone()));
        prop_assert_eq!(range_list("cpuset.mems", &format!("{text}\n")), Ok(set));
    }

    #[test]
    fn controller_lists_round_trip(
        set in proptest::collection::btree_set("[a-z_]{1,12}", 0..8),
    ) {
        let text = set.iter().cloned().collect::<Vec<_>>().join(" ");
        let want: BTreeSet<String> = set;
        prop_assert_eq!(controllers("cgroup.controllers", &format!("{text}\n")), Ok(want));
    }
}
