//! The engine's view of the node's kubelet: its configuration as last read (or why it
//! could not be), and what the last pass left to it.

use nodemem_model::settings::NodeSettings;
use nodemem_model::values::memory_qos::NodeMemoryFacts;

use crate::kubelet::conflict::{kubelet_conflict, KubeletConflict};
use crate::kubelet::{KubeletFiles, KubeletSettings, KubeletUnread, OwnDropIn};

/// The kubelet as the engine last read it.
#[derive(Default)]
pub(super) struct KubeletView {
    /// The kubelet's settings, read on whole-node passes only (not on reactions);
    /// what is assumed when they cannot be read.
    pub(super) settings: Option<KubeletSettings>,
    /// Why the kubelet's settings could not be read (condition reason, message).
    pub(super) unread: Option<KubeletUnread>,
    /// What the last pass left to the kubelet.
    pub(super) conflict: Option<KubeletConflict>,
}

impl KubeletView {
    /// Reads the kubelet's configuration. When it cannot be read, the last reading
    /// stays (or, with none, a configuration that names nothing is assumed) and the
    /// `KubeletConfigRead` condition says why (enforcement: Kubelet refuses on its own
    /// read).
    pub(super) fn read(&mut self, files: &KubeletFiles) {
        match files.read(OwnDropIn::OnDisk) {
            Ok(k) => {
                if self.unread.take().is_some() {
                    tracing::info!(from = ?k.origin.sources(), "read the kubelet's configuration");
                }
                self.settings = Some(k);
            }
            Err(e) => {
                let message = e.to_string();
                if self.unread.as_ref().is_none_or(|u| u.message != message) {
                    tracing::warn!(error = %message, "the kubelet's configuration cannot be read");
                }
                let kept_last = match &self.unread {
                    Some(u) => u.kept_last,
                    None => self.settings.is_some(),
                };
                if self.settings.is_none() {
                    self.settings = Some(KubeletSettings::default());
                }
                self.unread = Some(KubeletUnread {
                    reason: e.reason(),
                    message,
                    kept_last,
                });
            }
        }
    }

    /// The kubelet's hard eviction threshold from its configuration as last read (its
    /// default when the file is not there; a percentage of `capacity`).
    pub(super) fn hard_eviction_memory(&self, capacity: Option<i64>) -> Option<i64> {
        match &self.settings {
            Some(k) => k.hard_eviction_memory(capacity),
            None => KubeletSettings::default().hard_eviction_memory(capacity),
        }
    }

    /// What a pass for `settings` leaves to the kubelet, kept as the last pass's.
    pub(super) fn decide_conflict(&mut self, memory: &NodeMemoryFacts, settings: &NodeSettings) {
        self.conflict = self
            .settings
            .as_ref()
            .and_then(|k| kubelet_conflict(k, memory.kubelet_version, settings));
    }

    /// The files the last pass left to the kubelet.
    pub(super) fn left_alone(&self) -> &'static [&'static str] {
        self.conflict.as_ref().map_or(&[], |c| c.files)
    }
}
