//! The plugin's command line (clap): what `kubectl nodemem` takes.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use kube::api::PatchParams;

use crate::render::Format;

/// The plugin's name on PATH.
pub const PLUGIN_BINARY: &str = "kubectl-nodemem";
/// Its completion executable on PATH: kubectl (1.26 and later) runs it to complete
/// `kubectl nodemem ...` (the binary linked under this name answers completions).
pub const COMPLETION_BINARY: &str = "kubectl_complete-nodemem";
/// The field manager of the plugin's writes: `managedFields` and the audit log name it.
pub const FIELD_MANAGER: &str = "kubectl-nodemem";

/// Whether a command that writes does so (kubectl's `--dry-run`): `client` sends
/// nothing, `server` has the apiserver check the write (admission, validation) and keep
/// nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRun {
    #[default]
    None,
    Client,
    Server,
}

impl DryRun {
    /// The patch parameters of a write: the plugin's field manager, and a server dry run.
    pub(crate) fn params(self) -> PatchParams {
        PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            dry_run: self == DryRun::Server,
            ..PatchParams::default()
        }
    }

    /// Whether the write is sent at all.
    pub(crate) fn sends(self) -> bool {
        self != DryRun::Client
    }

    /// What the confirmation line ends with, as kubectl's.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            DryRun::None => "",
            DryRun::Client => " (dry run)",
            DryRun::Server => " (server dry run)",
        }
    }
}

/// nodemem for kubectl: status, explain, diff and rollout control.
#[derive(Debug, Parser)]
#[command(name = "kubectl nodemem", bin_name = "kubectl nodemem", version, about)]
pub struct PluginCli {
    /// Path to the kubeconfig file (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// For pause, resume, rollback and release: none (write), client (send nothing,
    /// say what would be written) or server (the apiserver checks the write and keeps
    /// nothing). `--dry-run` alone is client.
    #[arg(long, global = true, value_enum, default_value_t = DryRun::None,
        num_args = 0..=1, default_missing_value = "client", require_equals = true)]
    pub dry_run: DryRun,
    #[command(subcommand)]
    pub command: PluginCommand,
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Every policy and its pool: rollout progress, failing nodes with reasons, conflicts;
    /// with POLICY, that policy's alone (as the alerts name it).
    Status {
        /// One policy's name.
        policy: Option<String>,
    },
    /// Which policy governs NODE and why, its rollout state, and the cgroup values
    /// nodemem sets for each of its pods.
    Explain {
        /// The node's name.
        node: String,
    },
    /// What applying the policies in a file would change: the nodes they select and, per
    /// node and cgroup, the values from -> to. Exit 0: no change, 1: changes, 2: error.
    Diff {
        /// A file of NodeMemoryPolicies (as for kubectl apply -f).
        #[arg(short = 'f', long = "filename")]
        filename: PathBuf,
    },
    /// The throttling factor POLICY's pool tolerates (status.recommendation, from its
    /// nodes' observation) with the distribution behind it; -o yaml|json prints the
    /// policy with that factor, for `kubectl nodemem diff -f` and a commit.
    Recommend { policy: String },
    /// Stop POLICY's rollout where it is (spec.rollout.paused: true).
    Pause { policy: String },
    /// Let POLICY's rollout continue (spec.rollout.paused: false).
    Resume { policy: String },
    /// Return POLICY's pool to its previous revision; the controller records it in
    /// status.rolledBackRevision until the spec changes.
    Rollback { policy: String },
    /// Emergency: let a deleted POLICY's remaining nodes go at once instead of one
    /// rollout batch after another (removes its nodemem.io/handoff finalizer; their
    /// configs are then garbage-collected and each node's next policy takes it through
    /// its rollout). Also the way out for a policy left Terminating without a controller.
    Release {
        policy: String,
        /// Required: releasing at once is the one thing this command does.
        #[arg(long)]
        now: bool,
    },
    /// The plugin's version and the platform it was built for (as `kubectl version`
    /// says its own): what a bug report and `kubectl krew info nodemem` should match.
    Version,
    /// A completion script for `kubectl-nodemem` in SHELL. For `kubectl nodemem <TAB>`,
    /// link the binary as `kubectl_complete-nodemem` on PATH too (kubectl 1.26+).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}
