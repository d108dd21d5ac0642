//! No product function is longer than a reader can hold in their head, and none needs
//! clippy's `too_many_arguments` silenced: a long function is a list of steps that
//! want names, and a long argument list is a value that wants a type.
//!
//! The limit is in lines from `fn` to the closing brace. `cargo test -p nodemem-tidy
//! -- --nocapture` prints the longest function of each product crate.

use nodemem_tidy::functions::{self, Function};
use nodemem_tidy::{product_crates, repo_root};

const MAX_LINES: usize = 150;

/// Functions allowed past the limit, each with why. An entry that no longer offends
/// fails the check too, so the list only shrinks. Empty: every function fits.
const ALLOWED: &[(&str, &str, &str)] = &[];

fn every_product_function() -> Vec<(String, Function)> {
    let mut all = Vec::new();
    for name in product_crates() {
        let src = repo_root().join("crates").join(&name).join("src");
        let found = functions::of_crate(&src).unwrap_or_else(|e| panic!("{name}: {e}"));
        all.extend(found.into_iter().map(|f| (name.clone(), f)));
    }
    all
}

#[test]
fn no_product_function_is_too_long_or_takes_too_many_arguments() {
    let all = every_product_function();
    assert!(
        all.len() > 500,
        "the reader found {} functions: it misses modules",
        all.len()
    );
    report_longest(&all);
    let offenders: Vec<String> = all
        .iter()
        .filter(|(krate, f)| {
            (f.lines > MAX_LINES || f.allows_too_many_arguments) && !allowed(krate, f)
        })
        .map(|(krate, f)| describe(krate, f))
        .collect();
    assert!(
        offenders.is_empty(),
        "over {MAX_LINES} lines or silencing too_many_arguments (cut into named steps, \
         or pass a value with a type):\n{}",
        offenders.join("\n")
    );
    let stale: Vec<_> = ALLOWED
        .iter()
        .filter(|(krate, name, _)| {
            !all.iter().any(|(k, f)| {
                k == krate
                    && f.name == *name
                    && (f.lines > MAX_LINES || f.allows_too_many_arguments)
            })
        })
        .collect();
    assert!(
        stale.is_empty(),
        "allowed but no longer offending: {stale:?}"
    );
}

fn allowed(krate: &str, function: &Function) -> bool {
    ALLOWED
        .iter()
        .any(|(k, name, _why)| *k == krate && *name == function.name)
}

fn describe(krate: &str, f: &Function) -> String {
    format!(
        "  crates/{krate}/src/{}: {} ({} lines{})",
        f.file.display(),
        f.name,
        f.lines,
        if f.allows_too_many_arguments {
            ", allows too_many_arguments"
        } else {
            ""
        }
    )
}

fn report_longest(all: &[(String, Function)]) {
    println!("longest product function per crate:");
    for krate in product_crates() {
        if let Some((_, longest)) = all
            .iter()
            .filter(|(k, _)| *k == krate)
            .max_by_key(|(_, f)| f.lines)
        {
            println!("{}", describe(&krate, longest));
        }
    }
}
