//! The control-plane tier: a real kube-apiserver, etcd and kube-controller-manager
//! started by nodemem-testkit. One control plane is shared by this test binary; every
//! test uses its own namespace and names (see TESTING.md).

mod agent;
mod agents_blocked;
mod alerts;
mod authority;
mod chart;
mod churn;
mod churn_soak;
mod class_rollout;
mod common;
mod controller;
mod crd_skew;
mod crds;
mod defaults;
mod deleted_config;
mod excluded;
mod faults;
mod flowcontrol;
mod gitops_health;
mod ha_apiservers;
mod handoff;
mod identities;
mod kubelet_mode;
mod leader;
mod nodes;
mod observe;
mod outage;
mod own_image;
mod parallel;
mod quickstart;
mod reclaim;
mod recommend;
mod relief;
mod restart_mid_fanout;
mod rollout_faults;
mod runtime_record;
mod sandbox;
mod state_records;
mod storm;
mod upgrade;
