//! Every crate's modules depend on each other in one direction: no file imports,
//! directly or through other files, a file that imports it. A circle makes two files
//! one unit to read, test and move; the crate split (one crate per runtime) removed the
//! last ones and this keeps it so.
//!
//! The check reads each crate's `src/`, resolves every `crate::`, `super::`, `self::`
//! and child-module path (in `use` statements, grouped or not, and inline) to the file
//! that defines what it names (through `pub use` re-exports, to the file the item lives
//! in), and looks for strongly connected files. Test code (`#[cfg(test)] mod { }`
//! blocks) is left out: a test may reach anywhere. `mod x;` declarations are not
//! imports; a `pub use` re-export is.
//!
//! The model's folders are layers too: its top-level modules (a file with its folder,
//! `node.rs` and `node/`) never reach each other both ways, through any of their files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use nodemem_tidy::repo_root as repo;

/// The crate's files by module path (`lib.rs` is `[]`, `a/mod.rs` and `a.rs` are
/// `[a]`, `a/b.rs` is `[a, b]`). Binaries under `src/bin` are crates of their own and
/// `main.rs` beside a `lib.rs` is too.
fn module_files(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if prefix.is_empty() && name == "bin" {
                    continue;
                }
                let mut p = prefix.to_vec();
                p.push(name);
                walk(&path, &p, out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                let module = match stem {
                    "mod" => prefix.to_vec(),
                    "lib" if prefix.is_empty() => vec![],
                    "main" if prefix.is_empty() => continue,
                    other => {
                        let mut p = prefix.to_vec();
                        p.push(other.to_string());
                        p
                    }
                };
                out.insert(module, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &[], &mut out);
    if !out.contains_key(&Vec::new()) && src.join("main.rs").exists() {
        out.insert(vec![], src.join("main.rs"));
    }
    out
}

/// The text with comments removed, string and char literals blanked, and every
/// `#[cfg(test)] mod name { ... }` block cut out.
fn code_of(text: &str) -> String {
    let code = strip_comments_and_literals(text);
    let mut out = String::with_capacity(code.len());
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let block = trimmed.starts_with("mod ")
            && trimmed
                .find(['{', ';'])
                .is_some_and(|i| trimmed.as_bytes()[i] == b'{');
        out.push_str(&rest[..at]);
        if !block {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        // Skip to the brace that closes the module (literals are blank, so braces count).
        let open = trimmed.find('{').expect("checked above");
        let mut depth = 0usize;
        let mut end = trimmed.len();
        for (i, c) in trimmed[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &trimmed[end..];
    }
    out.push_str(rest);
    out
}

/// The text with comments removed and string and char literals blanked.
fn strip_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                out.push(' ');
            }
            'r' if (next == Some('"') || next == Some('#'))
                && !chars[..i]
                    .last()
                    .is_some_and(|p| p.is_alphanumeric() || *p == '_') =>
            {
                // A raw string r"..." or r#"..."#.
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    out.push(c);
                    i += 1;
                    continue;
                }
                j += 1;
                loop {
                    if j >= chars.len() {
                        break;
                    }
                    if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            '\'' => {
                // A char literal ('x', '\n', '\u{1F}'), else a lifetime.
                if next == Some('\\') {
                    let mut j = i + 2;
                    while j < chars.len() && chars[j] != '\'' {
                        j += 1;
                    }
                    i = j + 1;
                    out.push_str("' '");
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 3;
                    out.push_str("' '");
                } else {
                    out.push(c);
                    i += 1;
                }
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// `a::{b::{c, d}, f, self}` -> `a::b::c`, `a::b::d`, `a::f`, `a` (aliases are cut
/// before, while the spaces that delimit them are still there).
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        parts
    }
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let tree = tree.as_str();
    let mut out = Vec::new();
    match tree.find('{') {
        Some(open) => {
            let prefix: Vec<String> = tree[..open]
                .trim_end_matches("::")
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            let close = tree.rfind('}').unwrap_or(tree.len());
            for part in split_top(&tree[open + 1..close]) {
                if part.is_empty() {
                    continue;
                }
                for rest in expand_use_tree(part) {
                    let mut p = prefix.clone();
                    if rest != ["self"] {
                        p.extend(rest);
                    }
                    out.push(p);
                }
            }
        }
        None => out.push(
            tree.split("::")
                .filter(|s| !s.is_empty() && *s != "*")
                .map(str::to_string)
                .collect(),
        ),
    }
    out
}

/// The paths a file names: every `use` tree (aliases removed) and every inline
/// `crate::`/`super::`/`self::` path, and paths through the file's own child modules
/// (`children`), which need no prefix, as `self::child::...`.
fn paths_in(code: &str, children: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = String::new();
    let mut search = code;
    // `use` statements first (they may group), then what is left is scanned inline.
    loop {
        let found = search.match_indices("use ").find(|(i, _)| {
            search[..*i]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        });
        let Some((i, _)) = found else {
            rest.push_str(search);
            break;
        };
        rest.push_str(&search[..i]);
        let end = search[i..].find(';').map_or(search.len(), |e| i + e);
        let tree = &search[i + 4..end];
        let without_alias: String = tree
            .split(',')
            .map(|part| match part.find(" as ") {
                Some(a) => {
                    let tail = &part[a + 4..];
                    let keep = tail.find(['}', ',']).map_or("", |k| &tail[k..]);
                    format!("{}{}", &part[..a], keep)
                }
                None => part.to_string(),
            })
            .collect::<Vec<_>>()
            .join(",");
        for mut path in expand_use_tree(&without_alias) {
            if path.first().is_some_and(|first| children.contains(first)) {
                path.insert(0, "self".to_string());
            }
            paths.push(path);
        }
        search = &search[(end + 1).min(search.len())..];
    }
    let text = rest;
    let starts: Vec<String> = ["crate", "super", "self"]
        .iter()
        .map(|s| s.to_string())
        .chain(children.iter().cloned())
        .map(|s| format!("{s}::"))
        .collect();
    for start in &starts {
        let child = !["crate::", "super::", "self::"].contains(&start.as_str());
        for (i, _) in text.match_indices(start.as_str()) {
            if text[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':')
            {
                continue;
            }
            let path: String = text[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut path: Vec<String> = path
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            if child {
                path.insert(0, "self".to_string());
            }
            paths.push(path);
        }
    }
    paths
}

/// Where a path from `module` lands: the module of this crate it names and what is
/// left of the path inside it (an item), if the path is this crate's.
fn resolve(
    module: &[String],
    path: &[String],
    files: &BTreeMap<Vec<String>, PathBuf>,
) -> Option<(Vec<String>, Vec<String>)> {
    let mut base: Vec<String>;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base = vec![];
            rest = &path[1..];
        }
        Some("self") => {
            base = module.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            base = module.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    files.get(&base)?;
    let mut found = base.clone();
    for (i, seg) in rest.iter().enumerate() {
        base.push(seg.clone());
        if files.contains_key(&base) {
            found = base.clone();
        } else {
            return Some((found, rest[i..].to_vec()));
        }
    }
    Some((found, vec![]))
}

/// The file that defines what a path names: through a module's `pub use` re-exports
/// (a facade such as `numa.rs` re-exporting `machine::NumaTopology`) to the file
/// the item lives in, since that is the file the path depends on.
fn defining_file(
    module: &[String],
    path: &[String],
    files: &BTreeMap<Vec<String>, PathBuf>,
    reexports: &BTreeMap<Vec<String>, Vec<Vec<String>>>,
    depth: usize,
) -> Option<Vec<String>> {
    let (target, rest) = resolve(module, path, files)?;
    if let (Some(item), true) = (rest.first(), depth < 8) {
        let via = reexports
            .get(&target)
            .into_iter()
            .flatten()
            .find(|p| p.last() == Some(item));
        if let Some(via) = via {
            let mut full = via.clone();
            full.extend(rest[1..].iter().cloned());
            if let Some(inner) = defining_file(&target, &full, files, reexports, depth + 1) {
                return Some(inner);
            }
        }
    }
    Some(target)
}

/// The `pub use` statements of a file (re-exports), as paths.
fn reexports_in(code: &str, children: &[String]) -> Vec<Vec<String>> {
    let statements: String = code
        .match_indices("pub use ")
        .map(|(i, m)| {
            let end = code[i..].find(';').map_or(code.len(), |e| i + e + 1);
            format!("{}\n", &code[i + m.len() - 4..end])
        })
        .collect();
    paths_in(&statements, children)
}

/// Circles of files: each a list of files that reach each other, in a stable order.
fn circles(src: &Path) -> Vec<Vec<String>> {
    circles_with_reasons(src)
        .into_iter()
        .map(|(c, _)| c)
        .collect()
}

/// A crate's files (by module path) and which import which, each edge with one path
/// that makes it (to say in a failure why a file depends on another).
struct FileGraph {
    modules: Vec<Vec<String>>,
    names: Vec<PathBuf>,
    edges: Vec<BTreeSet<usize>>,
    why: BTreeMap<(usize, usize), String>,
}

fn file_graph(src: &Path) -> FileGraph {
    let files = module_files(src);
    let names: Vec<&PathBuf> = files.values().collect();
    let index: BTreeMap<&PathBuf, usize> = names.iter().enumerate().map(|(i, f)| (*f, i)).collect();
    let mut parsed = BTreeMap::new();
    let mut reexports = BTreeMap::new();
    for (module, file) in &files {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let code = code_of(&text);
        let children: Vec<String> = files
            .keys()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|m| m[module.len()].clone())
            .collect();
        reexports.insert(module.clone(), reexports_in(&code, &children));
        parsed.insert(module.clone(), paths_in(&code, &children));
    }
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); names.len()];
    // One path per edge, to say in a failure why a file depends on another.
    let mut why: BTreeMap<(usize, usize), String> = BTreeMap::new();
    for (module, paths) in &parsed {
        let from = index[&files[module]];
        for path in paths {
            if let Some(target) = defining_file(module, path, &files, &reexports, 0) {
                let to = index[&files[&target]];
                if to != from {
                    edges[from].insert(to);
                    why.entry((from, to)).or_insert_with(|| path.join("::"));
                }
            }
        }
    }
    FileGraph {
        modules: files.keys().cloned().collect(),
        names: names.into_iter().cloned().collect(),
        edges,
        why,
    }
}

/// The strongly connected components of more than one node (Tarjan's).
fn components(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    // Tarjan's strongly connected components.
    struct Tarjan<'e> {
        edges: &'e [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.edges[v] {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.out.push(component);
                }
            }
        }
    }
    let n = edges.len();
    let mut t = Tarjan {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out
}

/// Circles of files, each with its edges (`a.rs -> b.rs (the path)`).
fn circles_with_reasons(src: &Path) -> Vec<(Vec<String>, Vec<String>)> {
    let FileGraph {
        names, edges, why, ..
    } = file_graph(src);
    let rel = |i: usize| {
        names[i]
            .strip_prefix(src)
            .unwrap_or(&names[i])
            .display()
            .to_string()
    };
    let mut out: Vec<(Vec<String>, Vec<String>)> = components(&edges)
        .into_iter()
        .map(|c| {
            let reasons: Vec<String> = why
                .iter()
                .filter(|((a, b), _)| c.contains(a) && c.contains(b))
                .map(|((a, b), path)| format!("{} -> {} ({path})", rel(*a), rel(*b)))
                .collect();
            let mut c: Vec<String> = c
                .into_iter()
                .map(|i| {
                    names[i]
                        .strip_prefix(src)
                        .unwrap_or(&names[i])
                        .display()
                        .to_string()
                })
                .collect();
            c.sort();
            (c, reasons)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let crates = repo().join("crates");
    let mut found = Vec::new();
    let mut checked = 0;
    let mut dirs: Vec<_> = std::fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        for (circle, reasons) in circles_with_reasons(&src) {
            found.push(format!(
                "{}: {}\n    {}",
                dir.file_name().unwrap().to_string_lossy(),
                circle.join(" <-> "),
                reasons.join("\n    ")
            ));
        }
    }
    assert!(
        checked >= 5,
        "only {checked} crates found under {}",
        crates.display()
    );
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// A throwaway crate tree for the checker's own tests.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn the_check_finds_circles_through_grouped_super_and_inline_paths() {
    let dir = tree(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub mod d;\npub mod e;\n"),
        ("a/mod.rs", "mod once;\nmod output;\npub fn f() { once::g() }\n"),
        // once -> output (grouped), output -> once (inline super path): a circle.
        ("a/once.rs", "use super::output::{render as r, Out};\npub fn g() {}\n"),
        ("a/output.rs", "pub fn render() { super::once::g() }\npub struct Out;\n"),
        // b -> c only, and c's mention of b sits in a comment, a string and test code.
        ("b.rs", "use crate::c::Thing;\n"),
        (
            "c.rs",
            "// crate::b::x\npub struct Thing;\nconst S: &str = \"crate::b::x\";\n#[cfg(test)]\nmod tests {\n    use crate::b::*;\n    fn f() { if true { crate::b::g() } }\n}\npub fn h() {}\n",
        ),
        // Code after a test module still counts: d -> e after the block, e -> d.
        (
            "d.rs",
            "#[cfg(test)]\nmod tests {\n    fn t() { let s = \"}\"; }\n}\nuse crate::e::E;\npub struct D;\n",
        ),
        ("e.rs", "pub struct E;\nfn f(_: crate::d::D) {}\n"),
    ]);
    assert_eq!(
        circles(dir.path()),
        vec![
            vec!["a/once.rs".to_string(), "a/output.rs".to_string()],
            vec!["d.rs".to_string(), "e.rs".to_string()],
        ]
    );
}

#[test]
fn the_check_counts_a_root_reexport_and_a_parent_child_pair() {
    // lib re-exports a, and a reaches back for an item of the root.
    let dir = tree(&[
        (
            "lib.rs",
            "mod a;\npub use a::Thing;\npub const GROUP: &str = \"g\";\n",
        ),
        (
            "a.rs",
            "pub struct Thing;\nfn g() -> &'static str { crate::GROUP }\n",
        ),
    ]);
    assert_eq!(
        circles(dir.path()),
        vec![vec!["a.rs".to_string(), "lib.rs".to_string()]]
    );
    // A parent calling into its child, which takes the parent's type.
    let dir = tree(&[
        ("lib.rs", "pub mod agent;\n"),
        (
            "agent/mod.rs",
            "mod once;\npub struct Args;\npub fn run() { once::run() }\n",
        ),
        ("agent/once.rs", "use super::Args;\npub fn run() {}\n"),
    ]);
    assert_eq!(
        circles(dir.path()),
        vec![vec![
            "agent/mod.rs".to_string(),
            "agent/once.rs".to_string()
        ]]
    );
}

#[test]
fn use_trees_expand_with_aliases_and_self() {
    let paths = paths_in(
        "use super::{engine::{X, Y as Z}, health, self};\nuse crate::a::b as c;\nuse kid::T;\nfn f() { kid::g(); other::h(); }\n",
        &["kid".to_string()],
    );
    assert_eq!(
        paths,
        vec![
            vec!["super", "engine", "X"],
            vec!["super", "engine", "Y"],
            vec!["super", "health"],
            vec!["super"],
            vec!["crate", "a", "b"],
            vec!["self", "kid", "T"],
            vec!["self", "kid", "g"],
        ]
        .into_iter()
        .map(|p| p.into_iter().map(str::to_string).collect::<Vec<_>>())
        .collect::<Vec<_>>()
    );
}

/// Circles of a crate's top-level modules, each a file or a folder with its parent file
/// (`node.rs` and `node/` are `node`): the folders are layers when none reaches back to
/// one that reaches it. Each circle comes with the file edges that make it.
fn folder_circles(src: &Path) -> Vec<(Vec<String>, Vec<String>)> {
    let g = file_graph(src);
    // The crate root (lib.rs) declares and re-exports everything: not a layer.
    let top: Vec<Option<String>> = g.modules.iter().map(|m| m.first().cloned()).collect();
    let mut folders: Vec<String> = top.iter().flatten().cloned().collect();
    folders.sort();
    folders.dedup();
    let at = |name: &String| folders.binary_search(name).expect("a folder");
    let mut edges = vec![BTreeSet::new(); folders.len()];
    let mut why: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
    for (from, tos) in g.edges.iter().enumerate() {
        for &to in tos {
            let (Some(a), Some(b)) = (&top[from], &top[to]) else {
                continue;
            };
            if a != b {
                edges[at(a)].insert(at(b));
                let rel = |i: usize| {
                    g.names[i]
                        .strip_prefix(src)
                        .unwrap_or(&g.names[i])
                        .display()
                        .to_string()
                };
                why.entry((at(a), at(b))).or_default().push(format!(
                    "{} -> {} ({})",
                    rel(from),
                    rel(to),
                    g.why[&(from, to)]
                ));
            }
        }
    }
    let mut out: Vec<(Vec<String>, Vec<String>)> = components(&edges)
        .into_iter()
        .map(|c| {
            let reasons = why
                .iter()
                .filter(|((a, b), _)| c.contains(a) && c.contains(b))
                .flat_map(|(_, r)| r.clone())
                .collect();
            let mut names: Vec<String> = c.into_iter().map(|i| folders[i].clone()).collect();
            names.sort();
            (names, reasons)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_models_folders_are_layers() {
    let found = folder_circles(&repo().join("crates/nodemem-model/src"));
    let said: Vec<String> = found
        .iter()
        .map(|(c, r)| format!("{}\n    {}", c.join(" <-> "), r.join("\n    ")))
        .collect();
    assert!(
        found.is_empty(),
        "folder circles in the model:\n{}",
        said.join("\n")
    );
}

#[test]
fn the_folder_check_finds_folders_that_reach_each_other_through_files_in_one_direction() {
    // No file circle: values/creation.rs reads node.rs, which reads values/cgroup.rs.
    // The folders `values` and `node` reach each other all the same.
    let dir = tree(&[
        ("lib.rs", "pub mod node;\npub mod values;\n"),
        ("values.rs", "pub mod cgroup;\npub mod creation;\n"),
        ("values/cgroup.rs", "pub struct Value;\n"),
        (
            "values/creation.rs",
            "use crate::node::Desired;\npub fn f(_: &Desired) {}\n",
        ),
        (
            "node.rs",
            "use crate::values::cgroup::Value;\npub struct Desired(pub Value);\n",
        ),
        ("warning.rs", "use crate::values::cgroup::Value;\n"),
    ]);
    assert!(circles(dir.path()).is_empty());
    let found = folder_circles(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ["node", "values"]);
    assert_eq!(
        found[0].1,
        [
            "node.rs -> values/cgroup.rs (crate::values::cgroup::Value)",
            "values/creation.rs -> node.rs (crate::node::Desired)"
        ]
    );
}
