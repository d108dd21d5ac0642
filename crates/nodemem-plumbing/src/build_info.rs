//! `nodemem_build_info`: which build a process runs (version, component, architecture),
//! value 1, the Prometheus convention for joining other series to a build.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    component: &'static str,
    arch: &'static str,
}

/// Registers `nodemem_build_info` in `registry` (the root one: no prefix).
pub fn register(registry: &mut Registry, component: &'static str) {
    registry.register(
        "nodemem_build",
        "The nodemem build this process runs (value 1)",
        Info::new(BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            component,
            arch: std::env::consts::ARCH,
        }),
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_series_named_by_the_convention() {
        let mut registry = prometheus_client::registry::Registry::default();
        super::register(&mut registry, "agent");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let line = format!(
            "nodemem_build_info{{version=\"{}\",component=\"agent\",arch=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::ARCH
        );
        assert!(text.lines().any(|l| l == line), "{text}");
    }
}
