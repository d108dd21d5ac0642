//! nodemem's memory.high against the kubelet's own arithmetic (issue 42, item 3), to
//! the page: the kubelet's three float64 expressions compiled by Go as the kubelet is
//! (tests/kubelet-float, with k8s.io/apimachinery's quantities), for amd64 and for
//! arm64 (run under qemu-user: Go fuses the multiply-add there, so an arm64 kubelet can
//! write another page). Random quantities in every unit (fractional bytes, milli-units,
//! decimal and binary suffixes) and random factors, and every Mi-aligned request/limit
//! pair under 512Mi at the factors the recommendation proposes most, each compared as
//! the bytes nodemem reads from the pod spec and the memory.high it writes; and the
//! cases where a fused multiply-add lands on another page (found by a search: each has
//! a request above its ceiling, which no valid pod has).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nodemem_model::quantity::Quantity;
use nodemem_model::values::factor::{KubeletFloat, ThrottlingFactor};

/// One case: request and ceiling as a pod spec writes them, the factor as a kubelet
/// configuration writes it, the page size.
struct Case {
    request: String,
    ceiling: String,
    factor: String,
    page: i64,
}

/// splitmix64: the same cases on every run, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A memory quantity up to a few TiB in one of the units pod specs use.
fn quantity(rng: &mut Rng) -> String {
    const SUFFIXES: [(&str, u64); 9] = [
        ("", 1 << 42),
        ("k", 1 << 32),
        ("Ki", 1 << 32),
        ("M", 1 << 22),
        ("Mi", 1 << 22),
        ("G", 4096),
        ("Gi", 4096),
        ("m", 1 << 50),
        ("e6", 1 << 22),
    ];
    let (suffix, range) = SUFFIXES[rng.below(SUFFIXES.len() as u64) as usize];
    let whole = rng.below(range);
    match rng.below(3) {
        // Fractional: bytes the kubelet rounds up (Quantity.Value()).
        0 if suffix != "m" && !suffix.starts_with('e') => {
            format!("{whole}.{}{suffix}", rng.below(1000))
        }
        _ => format!("{whole}{suffix}"),
    }
}

fn factor(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => ["0.7", "0.35", "0.37", "0.9", "0.6", "0.8", "0.1", "1"][rng.below(8) as usize].into(),
        1 => format!("0.{}", rng.below(10) + 1),
        2 => format!("0.{:02}", rng.below(99) + 1),
        _ => format!("0.{:04}", rng.below(9999) + 1),
    }
}

fn cases() -> Vec<Case> {
    let mut rng = Rng(0x6e6f_6465_6d65_6d00);
    let mut out = Vec::new();
    for _ in 0..100_000 {
        out.push(Case {
            request: quantity(&mut rng),
            ceiling: quantity(&mut rng),
            factor: factor(&mut rng),
            page: if rng.below(8) == 0 { 65_536 } else { 4096 },
        });
    }
    // Where Go's fused multiply-add (arm64) and amd64's two roundings part, found by a
    // search of 200 million random cases: each has a request above its ceiling.
    for (request, ceiling, factor) in [
        ("592168", "118198", "0.8"),
        ("129736968", "24807358", "0.8"),
        ("230597466705", "402486775", "0.9"),
        ("155208732798", "45309486298", "0.812"),
    ] {
        out.push(Case {
            request: request.into(),
            ceiling: ceiling.into(),
            factor: factor.into(),
            page: 4096,
        });
    }
    for f in ["0.7", "0.35"] {
        for limit in 1..512 {
            for request in 0..limit {
                out.push(Case {
                    request: format!("{request}Mi"),
                    ceiling: format!("{limit}Mi"),
                    factor: f.into(),
                    page: 4096,
                });
            }
        }
    }
    out
}

/// The built programs (tests/scripts/build-kubelet-float.sh via `make kubelet-float`).
fn programs() -> PathBuf {
    PathBuf::from(std::env::var("NODEMEM_KUBELET_FLOAT").expect(
        "NODEMEM_KUBELET_FLOAT: the directory tests/scripts/build-kubelet-float.sh prints (make kubelet-float)",
    ))
}

/// Each case's answer from one program: request and ceiling bytes, memory.high of the
/// container, allocatable and pod expressions.
fn run(mut command: Command, cases: &[Case]) -> Vec<[i64; 5]> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let mut input = String::new();
    for c in cases {
        input.push_str(&format!(
            "{} {} {} {}\n",
            c.request, c.ceiling, c.factor, c.page
        ));
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let answers: Vec<[i64; 5]> = text
        .lines()
        .map(|l| {
            let v: Vec<i64> = l.split(' ').map(|n| n.parse().unwrap()).collect();
            [v[0], v[1], v[2], v[3], v[4]]
        })
        .collect();
    assert_eq!(answers.len(), cases.len(), "one answer per case");
    answers
}

/// Compares nodemem with one architecture's answers; how many cases the exact formula
/// would have missed.
fn compare(cases: &[Case], answers: &[[i64; 5]], float: KubeletFloat) -> usize {
    let mut exact_apart = 0;
    let mut wrong = Vec::new();
    for (c, a) in cases.iter().zip(answers) {
        let request = Quantity::parse(&c.request).unwrap().value();
        let ceiling = Quantity::parse(&c.ceiling).unwrap().value();
        let f = ThrottlingFactor::from_f64(c.factor.parse().unwrap()).unwrap();
        let high = f.memory_high(request, ceiling, c.page, float);
        let ours = [request, ceiling, high, high, high];
        if ours != *a && wrong.len() < 10 {
            wrong.push(format!(
                "{} {} {} page {}: kubelet {a:?}, nodemem {ours:?}",
                c.request, c.ceiling, c.factor, c.page
            ));
        }
        if f.exact_memory_high(request, ceiling, c.page) != a[2] {
            exact_apart += 1;
        }
    }
    assert!(
        wrong.is_empty(),
        "{float:?}: nodemem differs from the kubelet's arithmetic:\n{}",
        wrong.join("\n")
    );
    exact_apart
}

#[test]
fn memory_high_is_the_kubelets_float64_to_the_page_on_amd64_and_arm64() {
    let cases = cases();
    let dir = programs();
    let amd64 = run(Command::new(dir.join("kubelet-float-amd64")), &cases);
    let mut emulated = Command::new("qemu-aarch64-static");
    emulated.arg(dir.join("kubelet-float-arm64"));
    let arm64 = run(emulated, &cases);

    let exact_amd64 = compare(&cases, &amd64, KubeletFloat::Separate);
    let exact_arm64 = compare(&cases, &arm64, KubeletFloat::Fused);
    let apart: Vec<&[i64; 5]> = amd64
        .iter()
        .zip(&arm64)
        .filter(|(a, b)| a != b)
        .map(|(a, _)| a)
        .collect();
    let architectures_apart = apart.len();
    // Only where the request exceeds the ceiling, which no valid pod has.
    assert!(
        apart.iter().all(|a| a[0] > a[1]),
        "amd64 and arm64 kubelets part on a valid pod: {apart:?}"
    );
    eprintln!(
        "{} cases: nodemem equals the kubelet's arithmetic on amd64 and arm64; the exact formula would be a page off in {exact_amd64} (amd64) and {exact_arm64} (arm64); the two architectures' kubelets part in {architectures_apart}",
        cases.len()
    );
    // The comparison can tell: exact arithmetic is not the kubelet's, and Go's arm64
    // code fuses the multiply-add where amd64's does not.
    assert!(exact_amd64 > 0 && exact_arm64 > 0);
    assert!(architectures_apart > 0);
}
