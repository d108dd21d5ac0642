//! The agent's and the controller's metrics as the binaries expose them, with one
//! series of every family (a family with labels shows once it has a series), for the
//! checks that compare docs and alerts with what is really exported.

use nodemem_plumbing::endpoints::Endpoints;

/// Both expositions, one after the other.
pub fn one_of_each() -> String {
    use nodemem_agent::health::Reading;
    use nodemem_agent::metrics::{Metrics as AgentMetrics, PodSignals, Trigger};
    use nodemem_controller::metrics::{ErrorCategory, Metrics as ControllerMetrics};
    // A family (a metric with labels) shows in the exposition once it has a series:
    // one of each is recorded, as the binaries record them.
    let agent = AgentMetrics::with_container_series(10);
    let reading = Reading {
        high: 1,
        oom_kill: 1,
        full_avg60: Some(0.5),
        refaults: Some(1),
        judged: true,
    };
    agent.signals(&[PodSignals {
        namespace: "ns",
        pod: "p",
        qos: "burstable",
        reading,
        containers: vec![("c", reading)],
    }]);
    agent.record_pass(Trigger::Start, 0.01);
    agent.reaction(0.001);
    agent.writes(1, 1, &[Some(28)], true);
    agent.node(1, 1, 1, &[("batch", 1)].into(), Some((1, 0)));
    agent.unit_updates(&nodemem_agent::units::HoldOutcome {
        set: 1,
        gone: 1,
        failed: 1,
    });
    agent.runtime_records(1, 1);
    agent.nri_request("adjusted");
    agent.nri_answer("CreateContainer", 0.001);
    agent.nri_connection("registered", true);
    agent.status_write("ok");
    agent.watch_list("config");
    agent.relief("MemoryHighRelieved");
    agent.reclaim.tick(
        1,
        Some(nodemem_agent::reclaim::ReclaimMode::Active),
        &nodemem_agent::reclaim::TickReport::default(),
    );
    let condition = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: "Applied".into(),
        status: "True".into(),
        reason: "Applied".into(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ),
    };
    agent.conditions(std::slice::from_ref(&condition));
    agent.config(Some(("n1", "p", "r1")));
    let controller = ControllerMetrics::new();
    controller.reconciled(0.01);
    controller.write("config", false);
    controller.error(ErrorCategory::Watch);
    controller.deferred("config", 1);
    controller.backing_off(&std::iter::once(("config", 1)).collect());
    let status = nodemem_api::NodeMemoryPolicyStatus {
        conditions: vec![condition],
        ..Default::default()
    };
    controller.policies(std::iter::once(("p", &status)));
    agent.metrics() + &controller.metrics()
}
