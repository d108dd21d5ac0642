//! The apiserver restarted under every agent's watches (issue 64): how many had to list
//! again, what the restarted apiserver was asked, second by second, and how long until
//! it held as many watches as before. Or, with NODEMEM_WATCH_RESTART=rolling, two
//! apiservers on one etcd behind one address (a highly available control plane, as
//! every managed one is) and one of them taken out as a rolling upgrade does: what the
//! watches do on the other.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kube::Client;
use nodemem_testkit::control_plane::client_from_kubeconfig;
use nodemem_testkit::proxy::TcpProxy;
use nodemem_testkit::second_apiserver::SecondApiserver;
use nodemem_testkit::{ControlPlane, Identity};

/// Two apiservers on one etcd, the agents reaching them through one address (the
/// proxy, standing for the load balancer), which sends them to the first.
pub struct Ha {
    second: SecondApiserver,
    proxy: TcpProxy,
    second_client: Client,
}

impl Ha {
    /// Starts the second apiserver and the proxy in front of the first. Blocking.
    pub fn start(cluster: &super::common::Cluster) -> Ha {
        let second = SecondApiserver::start(&cluster.cp).unwrap();
        let first: SocketAddr = cluster
            .cp
            .server
            .trim_start_matches("https://")
            .parse()
            .unwrap();
        let proxy = TcpProxy::start(first).unwrap();
        let second_client = cluster
            .runtime
            .block_on(client_from_kubeconfig(second.admin_kubeconfig()))
            .unwrap();
        // An apiserver makes a custom resource's storage, and its watch cache, at the
        // first request for it (k8s.io/apiextensions-apiserver, `crdHandler`): one
        // behind a balancer has served the configs before. Without this read the
        // second's config cache would begin at the switch, after every watch's last.
        cluster.runtime.block_on(async {
            let configs: kube::Api<nodemem_api::NodeMemoryConfig> =
                kube::Api::all(second_client.clone());
            configs
                .list(&kube::api::ListParams::default().limit(1))
                .await
                .unwrap();
        });
        Ha {
            second,
            proxy,
            second_client,
        }
    }

    /// A client acting as `identity` through the proxy.
    pub async fn client(&self, cp: &ControlPlane, identity: &Identity) -> Client {
        let path = cp.kubeconfig(identity).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let via = path.with_extension("via-proxy");
        std::fs::write(&via, text.replace(&cp.server, &self.proxy.https_url())).unwrap();
        client_from_kubeconfig(&via).await.unwrap()
    }
}

/// What the restarted apiserver (or the one left) saw.
pub struct Restarted {
    /// From the stop to the apiserver ready again (rolling: to the first one gone).
    pub down: Duration,
    /// From ready to holding `watches` watches again (None: not within the window).
    pub watches_back: Option<Duration>,
    /// resource -> LIST requests answered since the restart.
    pub lists: BTreeMap<String, f64>,
    /// The most watches it held at once in the window.
    pub most_watches: f64,
    /// The most LIST requests in one second of the window.
    pub peak_lists_per_second: f64,
    /// Requests its flow control turned away (429) since the restart.
    pub rejected: f64,
    /// The starts it took to stay up.
    pub starts: u32,
}

/// The starts tried before the run fails.
const MOST_STARTS: u32 = 5;

/// How long the restarted apiserver is watched.
const WINDOW: Duration = Duration::from_secs(90);

/// Stops the apiserver, starts it again after `pause`, then reads its metrics every
/// second for [`WINDOW`] (its counters begin again at the restart): the LIST
/// requests per resource, their busiest second, the requests turned away, and when it
/// held `watches` open watches again.
pub fn restart_and_watch(
    cluster: &mut super::common::Cluster,
    pause: Duration,
    watches: f64,
) -> Restarted {
    let stopped = Instant::now();
    cluster.cp.stop_apiserver();
    std::thread::sleep(pause);
    // Started again until it stays up, as its supervisor (systemd, the kubelet of a
    // static pod) would: on this test bed the reconnecting watches can make a start fail.
    let mut starts = 0;
    loop {
        starts += 1;
        match cluster.cp.start_apiserver() {
            Ok(()) => break,
            Err(e) if starts < MOST_STARTS => {
                let said = e.to_string();
                eprintln!(
                    "agent_watches: the restarted apiserver did not come up (start {starts}): {}",
                    said.lines().next().unwrap_or_default()
                );
            }
            Err(e) => panic!("the apiserver did not start again in {starts} starts: {e}"),
        }
    }
    let down = stopped.elapsed();
    watch_window(
        cluster,
        &cluster.client.clone(),
        &BTreeMap::new(),
        watches,
        (down, starts),
    )
}

/// The first apiserver taken out as a rolling upgrade does: the proxy sends new
/// connections to the second one, then the first stops (SIGTERM) and its watches end;
/// the agents' watchers open them again through the proxy, on the second apiserver,
/// from the resource version each last saw. Then the second one is watched as
/// [`restart_and_watch`] watches a restarted one (its counts since the switch).
pub fn roll_over(cluster: &mut super::common::Cluster, ha: &Ha, watches: f64) -> Restarted {
    let before = cluster
        .runtime
        .block_on(metrics(&ha.second_client))
        .unwrap();
    ha.proxy.retarget(ha.second.addr());
    let stopped = Instant::now();
    cluster.cp.stop_apiserver();
    let down = stopped.elapsed();
    watch_window(cluster, &ha.second_client, &before, watches, (down, 1))
}

/// Reads `client`'s apiserver's metrics every second for [`WINDOW`]: its LIST requests
/// per resource and their busiest second, the requests turned away and when it held
/// `watches` open watches, counted from `baseline`.
fn watch_window(
    cluster: &super::common::Cluster,
    client: &Client,
    baseline: &BTreeMap<String, f64>,
    watches: f64,
    (down, starts): (Duration, u32),
) -> Restarted {
    let ready = Instant::now();
    let mut watches_back = None;
    let mut last_lists = total(baseline, "apiserver_request_total{", "verb=\"LIST\"");
    let mut peak = 0.0_f64;
    let mut most_watches = 0.0_f64;
    let mut last = baseline.clone();
    while ready.elapsed() < WINDOW {
        let tick = Instant::now();
        if let Some(m) = cluster.runtime.block_on(metrics(client)) {
            let lists = total(&m, "apiserver_request_total{", "verb=\"LIST\"");
            peak = peak.max(lists - last_lists);
            last_lists = lists;
            let open = total(&m, "apiserver_longrunning_requests{", "verb=\"WATCH\"");
            most_watches = most_watches.max(open);
            if watches_back.is_none() && open >= watches {
                watches_back = Some(ready.elapsed());
            }
            last = m;
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed()));
    }
    let mut lists = BTreeMap::new();
    for (series, value) in &last {
        if series.starts_with("apiserver_request_total{") && series.contains("verb=\"LIST\"") {
            let since = value - baseline.get(series).copied().unwrap_or(0.0);
            *lists.entry(label(series, "resource")).or_insert(0.0) += since;
        }
    }
    let rejected = "apiserver_flowcontrol_rejected_requests_total{";
    Restarted {
        down,
        watches_back,
        lists,
        peak_lists_per_second: peak,
        most_watches,
        rejected: total(&last, rejected, "") - total(baseline, rejected, ""),
        starts,
    }
}

/// The apiserver's metrics as `series -> value`, None while it does not answer.
async fn metrics(client: &Client) -> Option<BTreeMap<String, f64>> {
    let req = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(req).await.ok()?;
    Some(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                Some((series.to_string(), value.parse().ok()?))
            })
            .collect(),
    )
}

/// The sum of `family`'s series whose labels contain `needle`.
fn total(m: &BTreeMap<String, f64>, family: &str, needle: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with(family) && k.contains(needle))
        .map(|(_, v)| v)
        .sum()
}

/// A label's value in a series' name.
fn label(series: &str, name: &str) -> String {
    let key = format!("{name}=\"");
    series
        .split_once(&key)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or_else(String::new, |(v, _)| v.to_string())
}
