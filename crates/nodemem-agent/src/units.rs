//! Keeps systemd's record of each unit in step with what nodemem wrote into its cgroup
//! (systemd-driver nodes; why: `nodemem_apply::units`). After every pass the values
//! nodemem holds in slices and scopes are sent to systemd as unit properties, each
//! once until it changes. Without systemd (not reachable, not mounted) the files are
//! still written and the agent says, once per retry, that systemd will undo them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use nodemem_apply::units::{UnitProperty, UnitRecords, UnitUpdate, UnitValue};
use nodemem_systemd::{BusAddress, PropertyValue, Systemd, UnitProperties};

use nodemem_apply::applier::UnitHandoff;
use tracing::{debug, warn};

/// How often an unreachable systemd is tried again.
const RECONNECT_EVERY: Duration = Duration::from_secs(30);

/// What one round of updates did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldOutcome {
    /// Units that took their properties.
    pub set: usize,
    /// Units systemd no longer knows (the pod or container ended meanwhile).
    pub gone: usize,
    /// Units that refused, or every unit when systemd was not reachable.
    pub failed: usize,
}

pub struct UnitHolder {
    addresses: Vec<BusAddress>,
    systemd: Option<Systemd>,
    last_attempt: Option<Instant>,
    records: UnitRecords,
}

impl UnitHolder {
    pub fn new(addresses: Vec<BusAddress>) -> Self {
        UnitHolder {
            addresses,
            systemd: None,
            last_attempt: None,
            records: UnitRecords::default(),
        }
    }

    async fn connected(&mut self) -> Option<&Systemd> {
        if self.systemd.is_none() {
            if self
                .last_attempt
                .is_some_and(|t| t.elapsed() < RECONNECT_EVERY)
            {
                return None;
            }
            self.last_attempt = Some(Instant::now());
            match Systemd::connect_any(&self.addresses).await {
                Ok(s) => {
                    tracing::info!(address = s.address(), "connected to systemd: nodemem's values in slices and scopes are set as unit properties too, so systemd's re-applies keep them");
                    self.systemd = Some(s);
                }
                Err(failures) => {
                    let why: Vec<String> = failures.iter().map(ToString::to_string).collect();
                    warn!(errors = ?why, "systemd is not reachable: values are written into the cgroup files only, and systemd puts its own back on its next reload or property change");
                }
            }
        }
        self.systemd.as_ref()
    }

    /// What the applier's passes left for systemd's record: the files they wrote, then
    /// the values held.
    pub async fn take_over(&mut self, handoff: &UnitHandoff) -> HoldOutcome {
        self.rewritten(
            handoff
                .rewritten
                .iter()
                .map(|(c, f)| (c.as_str(), f.as_str())),
        );
        self.hold(&handoff.held, handoff.live.as_ref()).await
    }

    /// The files a pass wrote: each may have been changed through systemd, whose
    /// record of it is then told again (`UnitRecords::rewritten`).
    pub fn rewritten<'w>(&mut self, written: impl IntoIterator<Item = (&'w str, &'w str)>) {
        for (cgroup, file) in written {
            self.records.rewritten(cgroup, file);
        }
    }

    /// Sends what changed in `held`; with `live` (a whole-node pass), forgets units
    /// whose cgroups are no longer on the node.
    pub async fn hold(
        &mut self,
        held: &BTreeMap<String, BTreeMap<UnitProperty, UnitValue>>,
        live: Option<&BTreeSet<String>>,
    ) -> HoldOutcome {
        if let Some(live) = live {
            self.records.retain(live);
        }
        let updates = self.records.updates(held);
        let mut out = HoldOutcome::default();
        if updates.is_empty() {
            return out;
        }
        let Some(systemd) = self.connected().await else {
            out.failed = updates.len();
            return out;
        };
        let mut lost = false;
        let mut sent = Vec::new();
        for u in &updates {
            let properties = unit_properties(u);
            match systemd.set(&properties).await {
                Ok(()) => {
                    debug!(unit = %u.unit, properties = %nodemem_systemd::describe(&properties.properties), "set");
                    sent.push(u);
                    out.set += 1;
                }
                Err(e) if e.is_no_such_unit() => out.gone += 1,
                Err(e) => {
                    warn!(error = %e, "systemd refused the unit properties; the files hold nodemem's values until systemd's next re-apply, and the next pass asks again");
                    out.failed += 1;
                    lost |= e.is_connection_lost();
                }
            }
        }
        for u in sent {
            self.records.sent(u);
        }
        if lost {
            // Connect again on the next pass.
            self.systemd = None;
            self.last_attempt = None;
        }
        out
    }
}

/// The D-Bus client knows property names and types only: which property stands for
/// which cgroup file, and how its value is typed, is said here.
fn unit_properties(update: &UnitUpdate) -> UnitProperties {
    UnitProperties {
        unit: update.unit.clone(),
        properties: update
            .properties
            .iter()
            .map(|(property, value)| {
                let value = match value {
                    UnitValue::Bytes(bytes) => PropertyValue::U64(*bytes),
                    UnitValue::NodeMask(mask) => PropertyValue::Bytes(mask.clone()),
                };
                (property.name().to_string(), value)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_systemd::fake::FakeSystemd;

    const BURSTABLE: &str = "kubepods.slice/kubepods-burstable.slice";
    const GONE: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podgone.slice";

    fn held(low: u64) -> BTreeMap<String, BTreeMap<UnitProperty, UnitValue>> {
        [
            (
                BURSTABLE.to_string(),
                [(UnitProperty::MemoryLow, UnitValue::Bytes(low))].into(),
            ),
            (
                GONE.to_string(),
                [(UnitProperty::MemoryMin, UnitValue::Bytes(1 << 20))].into(),
            ),
        ]
        .into()
    }

    #[tokio::test]
    async fn units_are_told_once_gone_ones_are_counted_and_a_lost_systemd_is_reached_again() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("systemd/private");
        let mut holder = UnitHolder::new(BusAddress::host(dir.path()).to_vec());

        // No systemd yet: nothing is recorded as sent, and the agent does not retry on
        // every pass.
        let none = holder.hold(&held(10), None).await;
        assert_eq!(
            none,
            HoldOutcome {
                set: 0,
                gone: 0,
                failed: 2
            }
        );
        let fake = FakeSystemd::listen(&socket, &["kubepods-burstable-podgone.slice"]).unwrap();
        assert_eq!(
            holder.hold(&held(10), None).await.failed,
            2,
            "retried within {RECONNECT_EVERY:?}"
        );
        holder.last_attempt = None;

        let first = holder.hold(&held(10), None).await;
        assert_eq!(
            first,
            HoldOutcome {
                set: 1,
                gone: 1,
                failed: 0
            }
        );
        let units: Vec<String> = fake.calls().into_iter().map(|c| c.unit).collect();
        assert_eq!(
            units,
            [
                "kubepods-burstable.slice",
                "kubepods-burstable-podgone.slice"
            ]
        );

        // Told once: only the unit systemd did not know is asked again, until a
        // whole-node pass no longer lists it.
        assert_eq!(holder.hold(&held(10), None).await.gone, 1);
        let live: BTreeSet<String> = [BURSTABLE.to_string()].into();
        let mut without_gone = held(10);
        without_gone.remove(GONE);
        assert_eq!(
            holder.hold(&without_gone, Some(&live)).await,
            HoldOutcome::default()
        );
        fake.calls();

        // A changed value is sent; systemd gone (re-executed): the call fails, the
        // next attempt connects again and sends it.
        fake.stop();
        let lost = holder.hold(&without_gone_with(20), Some(&live)).await;
        assert_eq!(lost.failed, 1);
        let fake = FakeSystemd::listen(&socket, &[]).unwrap();
        let again = holder.hold(&without_gone_with(20), Some(&live)).await;
        assert_eq!(
            again,
            HoldOutcome {
                set: 1,
                gone: 0,
                failed: 0
            }
        );
        assert_eq!(fake.calls().len(), 1);
    }

    fn without_gone_with(low: u64) -> BTreeMap<String, BTreeMap<UnitProperty, UnitValue>> {
        let mut h = held(low);
        h.remove(GONE);
        h
    }

    #[test]
    fn each_property_goes_to_systemd_by_its_name_and_type() {
        let update = UnitUpdate {
            cgroup: "kubepods.slice/kubepods-burstable.slice".into(),
            unit: "kubepods-burstable.slice".into(),
            properties: [
                (UnitProperty::MemoryHigh, UnitValue::Bytes(u64::MAX)),
                (
                    UnitProperty::AllowedMemoryNodes,
                    UnitValue::NodeMask(vec![3]),
                ),
            ]
            .into(),
        };
        let sent = unit_properties(&update);
        assert_eq!(sent.unit, "kubepods-burstable.slice");
        assert_eq!(
            sent.properties,
            vec![
                ("MemoryHigh".to_string(), PropertyValue::U64(u64::MAX)),
                (
                    "AllowedMemoryNodes".to_string(),
                    PropertyValue::Bytes(vec![3])
                ),
            ]
        );
        assert_eq!(
            nodemem_systemd::describe(&sent.properties),
            "MemoryHigh=infinity AllowedMemoryNodes=[3]"
        );
    }
}
