//! Completion of `kubectl nodemem ...`, as kubectl users expect it:
//!
//! * `kubectl nodemem completion bash|zsh|fish`: a script for `kubectl-nodemem` typed
//!   alone (clap_complete).
//! * kubectl's plugin completion (kubectl 1.26 and later): for `kubectl nodemem <TAB>`,
//!   kubectl runs `kubectl_complete-nodemem` with the words after `nodemem`, the last one
//!   the word being completed (empty for a new one), and reads one candidate per line
//!   (`word<TAB>description`) and a last line `:<directive>` (cobra's
//!   ShellCompDirective). The binary linked under that name answers ([`answer`]):
//!   subcommands, flags, flag values, and the cluster's policy and node names.
//!
//! What is wanted is decided from the words alone ([`want`], tested as a pure function);
//! only policy and node names are read from the cluster.

use clap::{Arg, Command, CommandFactory};

use crate::cli::PluginCli;

/// A completion script for `kubectl-nodemem` in `shell`.
pub fn script(shell: clap_complete::Shell) -> String {
    let mut cmd = PluginCli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, crate::cli::PLUGIN_BINARY, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// cobra's ShellCompDirective: the shell completes file names itself.
const DIRECTIVE_FILES: u8 = 0;
/// cobra's ShellCompDirectiveNoFileComp: no file names.
const DIRECTIVE_NO_FILES: u8 = 4;

/// What the word being completed can be.
#[derive(Debug, PartialEq, Eq)]
pub enum Want {
    /// These words, with a description each.
    Words(Vec<(String, String)>),
    /// A file name (the shell's own completion).
    Files,
    /// A NodeMemoryPolicy's name.
    Policies,
    /// A Node's name.
    Nodes,
    /// Nothing more.
    Nothing,
}

/// The connection the words name (`--kubeconfig`, `--context`), for the names.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Connection {
    pub kubeconfig: Option<String>,
    pub context: Option<String>,
}

/// What the last word of `words` (the words after `nodemem`) can be, and the connection
/// the others name.
pub fn want(words: &[String]) -> (Want, Connection) {
    let root = PluginCli::command();
    let (current, before) = match words.split_last() {
        Some((last, rest)) => (last.as_str(), rest),
        None => ("", &[][..]),
    };
    let mut sub: Option<&Command> = None;
    let mut pending: Option<&Arg> = None;
    let mut positionals = 0;
    let mut conn = Connection::default();
    for word in before {
        if let Some(arg) = pending.take() {
            remember(&mut conn, arg, word);
            continue;
        }
        if let Some(flag) = word.strip_prefix('-') {
            let (name, value) = flag.split_once('=').unwrap_or((flag, ""));
            let arg = find_flag(&root, sub, name);
            match arg {
                Some(a) if !value.is_empty() => remember(&mut conn, a, value),
                Some(a) if takes_next_word(a) => pending = Some(a),
                _ => {}
            }
            continue;
        }
        match sub {
            None => sub = root.find_subcommand(word),
            Some(_) => positionals += 1,
        }
    }
    let want = if let Some(arg) = pending {
        value_of(arg)
    } else if current.starts_with('-') {
        Want::Words(flags(&root, sub))
    } else {
        match sub {
            None => Want::Words(
                root.get_subcommands()
                    .filter(|c| !c.is_hide_set())
                    .map(|c| (c.get_name().to_string(), about(c.get_about())))
                    .collect(),
            ),
            Some(c) if positionals == 0 => positional(c),
            Some(_) => Want::Nothing,
        }
    };
    (filter(want, current), conn)
}

/// What a subcommand's first positional argument names.
fn positional(sub: &Command) -> Want {
    match sub.get_name() {
        "explain" => Want::Nodes,
        "status" | "recommend" | "pause" | "resume" | "rollback" | "release" => Want::Policies,
        _ => sub.get_positionals().next().map_or(Want::Nothing, value_of),
    }
}

/// What a flag's value can be: its possible values, a file, or anything.
fn value_of(arg: &Arg) -> Want {
    let values: Vec<(String, String)> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| (v.get_name().to_string(), about(v.get_help())))
        .collect();
    if !values.is_empty() {
        return Want::Words(values);
    }
    match arg.get_id().as_str() {
        "kubeconfig" | "filename" => Want::Files,
        _ => Want::Nothing,
    }
}

/// The flags of the subcommand (or of the plugin itself) and the global ones.
fn flags(root: &Command, sub: Option<&Command>) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = sub
        .into_iter()
        .flat_map(|c| c.get_arguments())
        .chain(
            root.get_arguments()
                .filter(|a| a.is_global_set() || sub.is_none()),
        )
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .filter_map(|a| {
            a.get_long()
                .map(|l| (format!("--{l}"), about(a.get_help())))
        })
        .collect();
    all.push(("--help".into(), "Print help".into()));
    all.sort();
    all.dedup();
    all
}

/// The flag `name` (after one dash: `-o`'s `o`, `--output`'s `-output`).
fn find_flag<'c>(root: &'c Command, sub: Option<&'c Command>, name: &str) -> Option<&'c Arg> {
    let matches = |a: &&Arg| match name.strip_prefix('-') {
        Some(long) => a.get_long() == Some(long),
        None => name.len() == 1 && a.get_short() == name.chars().next(),
    };
    sub.into_iter()
        .flat_map(|c| c.get_arguments())
        .chain(root.get_arguments())
        .find(matches)
}

/// Whether the flag's value is the next word (`-o json`), not only `--flag=value`.
fn takes_next_word(arg: &Arg) -> bool {
    arg.get_action().takes_values() && !arg.is_require_equals_set()
}

fn remember(conn: &mut Connection, arg: &Arg, value: &str) {
    match arg.get_id().as_str() {
        "kubeconfig" => conn.kubeconfig = Some(value.to_string()),
        "context" => conn.context = Some(value.to_string()),
        _ => {}
    }
}

fn about(text: Option<&clap::builder::StyledStr>) -> String {
    text.map(|t| {
        let t = t.to_string();
        t.split(['\n', '.'])
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    })
    .unwrap_or_default()
}

/// The words that start with what was typed.
fn filter(want: Want, typed: &str) -> Want {
    match want {
        Want::Words(words) => Want::Words(
            words
                .into_iter()
                .filter(|(w, _)| w.starts_with(typed))
                .collect(),
        ),
        other => other,
    }
}

/// kubectl's answer for `words`: candidates, one per line, then `:<directive>`.
/// Policy and node names come from the cluster the words (or KUBECONFIG) name; a
/// cluster that does not answer within 3 seconds gives none.
pub fn answer(words: &[String]) -> String {
    let (want, conn) = want(words);
    let typed = words.last().map(String::as_str).unwrap_or("");
    let (lines, directive): (Vec<String>, u8) = match want {
        Want::Words(words) => (
            words
                .into_iter()
                .map(|(w, d)| if d.is_empty() { w } else { format!("{w}\t{d}") })
                .collect(),
            DIRECTIVE_NO_FILES,
        ),
        Want::Files => (Vec::new(), DIRECTIVE_FILES),
        Want::Nothing => (Vec::new(), DIRECTIVE_NO_FILES),
        Want::Policies | Want::Nodes => {
            let names = names(&want, &conn).unwrap_or_default();
            (
                names.into_iter().filter(|n| n.starts_with(typed)).collect(),
                DIRECTIVE_NO_FILES,
            )
        }
    };
    let mut out: String = lines.into_iter().map(|l| l + "\n").collect();
    out.push_str(&format!(":{directive}\n"));
    out
}

/// The names of the cluster's policies or nodes.
fn names(want: &Want, conn: &Connection) -> Option<Vec<String>> {
    use kube::api::{Api, ListParams};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let list = async {
            let path = conn.kubeconfig.as_deref().map(std::path::Path::new);
            let client = crate::cluster::client(path, conn.context.as_deref())
                .await
                .ok()?;
            let params = ListParams::default();
            let names: Vec<Option<String>> = match want {
                Want::Policies => Api::<nodemem_api::NodeMemoryPolicy>::all(client)
                    .list_metadata(&params)
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .map(|p| p.metadata.name)
                    .collect(),
                _ => Api::<k8s_openapi::api::core::v1::Node>::all(client)
                    .list_metadata(&params)
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .map(|n| n.metadata.name)
                    .collect(),
            };
            Some(names.into_iter().flatten().collect())
        };
        tokio::time::timeout(std::time::Duration::from_secs(3), list)
            .await
            .ok()
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want_of(words: &[&str]) -> Want {
        want(&words.iter().map(|w| w.to_string()).collect::<Vec<_>>()).0
    }

    fn words(w: Want) -> Vec<String> {
        match w {
            Want::Words(ws) => ws.into_iter().map(|(w, _)| w).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn subcommands_first_then_what_each_takes() {
        let all = words(want_of(&[""]));
        for sub in [
            "status",
            "explain",
            "diff",
            "recommend",
            "pause",
            "resume",
            "rollback",
            "release",
            "completion",
            "version",
        ] {
            assert!(all.contains(&sub.to_string()), "{sub} in {all:?}");
        }
        assert_eq!(words(want_of(&["re"])), ["recommend", "resume", "release"]);
        assert_eq!(want_of(&["explain", ""]), Want::Nodes);
        assert_eq!(want_of(&["pause", "g"]), Want::Policies);
        assert_eq!(want_of(&["-o", "json", "rollback", ""]), Want::Policies);
        assert_eq!(want_of(&["status", ""]), Want::Policies);
        // One policy is all pause takes.
        assert_eq!(want_of(&["pause", "general", ""]), Want::Nothing);
        assert_eq!(
            words(want_of(&["completion", ""])),
            ["bash", "elvish", "fish", "powershell", "zsh"]
        );
    }

    #[test]
    fn flags_and_their_values() {
        assert_eq!(
            words(want_of(&["status", "-o", ""])),
            ["table", "json", "yaml"]
        );
        assert_eq!(words(want_of(&["--output", "y"])), ["yaml"]);
        assert_eq!(want_of(&["diff", "-f", ""]), Want::Files);
        assert_eq!(want_of(&["--kubeconfig", ""]), Want::Files);
        let flags = words(want_of(&["pause", "--"]));
        for f in [
            "--dry-run",
            "--kubeconfig",
            "--context",
            "--output",
            "--help",
        ] {
            assert!(flags.contains(&f.to_string()), "{f} in {flags:?}");
        }
        assert!(words(want_of(&["release", "x", "--n"])).contains(&"--now".to_string()));
        // --dry-run takes its value only after '=': the next word is the policy.
        assert_eq!(want_of(&["pause", "--dry-run", ""]), Want::Policies);
    }

    #[test]
    fn the_connection_the_words_name_is_used_for_names() {
        let words: Vec<String> = ["--kubeconfig", "/k", "--context=prod", "explain", ""]
            .iter()
            .map(|w| w.to_string())
            .collect();
        let (want, conn) = want(&words);
        assert_eq!(want, Want::Nodes);
        assert_eq!(
            conn,
            Connection {
                kubeconfig: Some("/k".into()),
                context: Some("prod".into())
            }
        );
    }

    #[test]
    fn answers_end_with_cobras_directive() {
        let out = answer(&["st".to_string()]);
        assert!(out.starts_with("status\t"), "{out}");
        assert!(out.ends_with("\n:4\n"), "{out}");
        assert_eq!(answer(&["diff".into(), "-f".into(), String::new()]), ":0\n");
    }

    #[test]
    fn scripts_for_every_shell_name_the_plugin() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            assert!(script(shell).contains("kubectl-nodemem"), "{shell}");
        }
    }
}
