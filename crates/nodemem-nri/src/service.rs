//! The plugin service (`nri.pkg.api.v1alpha1.Plugin`) dispatched to a [`Plugin`].
//!
//! A plugin's answers are plain values, never errors: NRI fails a container's creation
//! when a plugin answers CreateContainer with an error, and a plugin that cannot decide
//! answers with no adjustment instead. Only requests that cannot be decoded get an
//! error status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use prost::Message;
use ttrpc::proto::ResponseInit;
use ttrpc::r#async::{MethodHandler, Service, TtrpcContext};
use ttrpc::{get_status, Code, Request, Response};

use crate::api::{
    ConfigureRequest, ConfigureResponse, Container, ContainerUpdate, CreateContainerRequest,
    CreateContainerResponse, Empty, PodSandbox, StateChangeEvent, StopContainerRequest,
    StopContainerResponse, SynchronizeRequest, SynchronizeResponse, UpdateContainerRequest,
    UpdateContainerResponse, UpdatePodSandboxRequest, UpdatePodSandboxResponse,
    ValidateContainerAdjustmentRequest, ValidateContainerAdjustmentResponse,
};
use crate::events::Events;

pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// The runtime as Configure names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeInfo {
    pub name: String,
    pub version: String,
    /// How long the runtime waits for each answer (NRI's request timeout), in ms.
    pub request_timeout_ms: i64,
}

/// What a plugin does with the runtime's requests. Each has a default that changes
/// nothing, for the events a plugin does not subscribe to.
#[async_trait]
pub trait Plugin: Send + Sync + 'static {
    /// The events the runtime sends this plugin.
    fn events(&self) -> Events;

    /// The runtime configured the plugin (once per connection).
    async fn configured(&self, _runtime: RuntimeInfo) {}

    /// The runtime's pods and containers at connection time (chunks already joined);
    /// the answer updates existing containers.
    async fn synchronize(
        &self,
        _pods: Vec<PodSandbox>,
        _containers: Vec<Container>,
    ) -> Vec<ContainerUpdate> {
        Vec::new()
    }

    /// A container is about to be created: the answer adjusts its spec.
    async fn create_container(&self, _request: CreateContainerRequest) -> CreateContainerResponse {
        CreateContainerResponse::default()
    }

    /// A container's resources are about to be updated.
    async fn update_container(&self, _request: UpdateContainerRequest) -> UpdateContainerResponse {
        UpdateContainerResponse::default()
    }

    /// Any other subscribed event (a pod sandbox run, a container started...).
    async fn state_change(&self, _event: StateChangeEvent) {}

    /// The runtime is going down.
    async fn shutdown(&self) {}
}

/// The methods of the plugin service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    Configure,
    Synchronize,
    Shutdown,
    CreateContainer,
    UpdateContainer,
    StopContainer,
    UpdatePodSandbox,
    StateChange,
    ValidateContainerAdjustment,
}

impl Method {
    const ALL: [(&'static str, Method); 9] = [
        ("Configure", Method::Configure),
        ("Synchronize", Method::Synchronize),
        ("Shutdown", Method::Shutdown),
        ("CreateContainer", Method::CreateContainer),
        ("UpdateContainer", Method::UpdateContainer),
        ("StopContainer", Method::StopContainer),
        ("UpdatePodSandbox", Method::UpdatePodSandbox),
        ("StateChange", Method::StateChange),
        (
            "ValidateContainerAdjustment",
            Method::ValidateContainerAdjustment,
        ),
    ];
}

/// Synchronize's chunks so far (`more: true`), joined before the plugin sees them.
#[derive(Default)]
struct SyncChunks {
    pods: Vec<PodSandbox>,
    containers: Vec<Container>,
}

/// One connection's dispatcher: the plugin, what Configure said, and the chunks.
pub(crate) struct Dispatch {
    plugin: Arc<dyn Plugin>,
    chunks: Mutex<SyncChunks>,
    configured: tokio::sync::watch::Sender<Option<RuntimeInfo>>,
}

impl Dispatch {
    pub(crate) fn new(
        plugin: Arc<dyn Plugin>,
        configured: tokio::sync::watch::Sender<Option<RuntimeInfo>>,
    ) -> Arc<Self> {
        Arc::new(Dispatch {
            plugin,
            chunks: Mutex::default(),
            configured,
        })
    }

    /// The ttrpc service that routes each method here.
    pub(crate) fn service(self: &Arc<Self>) -> HashMap<String, Service> {
        let methods = Method::ALL
            .iter()
            .map(|(name, method)| {
                let handler: Box<dyn MethodHandler + Send + Sync> = Box::new(Handler {
                    method: *method,
                    dispatch: self.clone(),
                });
                (name.to_string(), handler)
            })
            .collect();
        let service = Service {
            methods,
            streams: HashMap::new(),
        };
        HashMap::from([(PLUGIN_SERVICE.to_string(), service)])
    }

    /// Answers one request's payload with the answer's payload.
    pub(crate) async fn answer(
        &self,
        method: Method,
        payload: &[u8],
    ) -> Result<Vec<u8>, prost::DecodeError> {
        let plugin = &self.plugin;
        Ok(match method {
            Method::Configure => {
                let req = ConfigureRequest::decode(payload)?;
                let info = RuntimeInfo {
                    name: req.runtime_name,
                    version: req.runtime_version,
                    request_timeout_ms: req.request_timeout,
                };
                plugin.configured(info.clone()).await;
                self.configured.send_replace(Some(info));
                ConfigureResponse {
                    events: plugin.events().mask(),
                }
                .encode_to_vec()
            }
            Method::Synchronize => self.synchronize(SynchronizeRequest::decode(payload)?).await,
            Method::Shutdown => {
                Empty::decode(payload)?;
                plugin.shutdown().await;
                Empty {}.encode_to_vec()
            }
            Method::CreateContainer => plugin
                .create_container(CreateContainerRequest::decode(payload)?)
                .await
                .encode_to_vec(),
            Method::UpdateContainer => plugin
                .update_container(UpdateContainerRequest::decode(payload)?)
                .await
                .encode_to_vec(),
            Method::StopContainer => {
                StopContainerRequest::decode(payload)?;
                StopContainerResponse::default().encode_to_vec()
            }
            Method::UpdatePodSandbox => {
                UpdatePodSandboxRequest::decode(payload)?;
                UpdatePodSandboxResponse::default().encode_to_vec()
            }
            Method::StateChange => {
                plugin
                    .state_change(StateChangeEvent::decode(payload)?)
                    .await;
                Empty {}.encode_to_vec()
            }
            Method::ValidateContainerAdjustment => {
                ValidateContainerAdjustmentRequest::decode(payload)?;
                ValidateContainerAdjustmentResponse::default().encode_to_vec()
            }
        })
    }

    /// A chunk with `more` is kept and answered with `more` and no updates (NRI closes
    /// a plugin that answers otherwise); the last one hands everything to the plugin.
    async fn synchronize(&self, req: SynchronizeRequest) -> Vec<u8> {
        let (pods, containers) = {
            let mut chunks = self.chunks.lock().expect("not poisoned");
            chunks.pods.extend(req.pods);
            chunks.containers.extend(req.containers);
            if req.more {
                return SynchronizeResponse {
                    update: Vec::new(),
                    more: true,
                }
                .encode_to_vec();
            }
            let all = std::mem::take(&mut *chunks);
            (all.pods, all.containers)
        };
        SynchronizeResponse {
            update: self.plugin.synchronize(pods, containers).await,
            more: false,
        }
        .encode_to_vec()
    }
}

struct Handler {
    method: Method,
    dispatch: Arc<Dispatch>,
}

#[async_trait]
impl MethodHandler for Handler {
    async fn handler(&self, _ctx: TtrpcContext, req: Request) -> ttrpc::Result<Response> {
        let res = match self.dispatch.answer(self.method, &req.payload).await {
            Ok(payload) => {
                let mut res = Response::init_status(get_status(Code::OK, ""));
                res.set_payload(payload);
                res
            }
            Err(e) => Response::init_status(get_status(
                Code::INVALID_ARGUMENT,
                format!("{} request not understood: {e}", req.method),
            )),
        };
        Ok(res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ContainerAdjustment, Event, LinuxContainerAdjustment, LinuxResources};

    struct Counting {
        synced: Mutex<Vec<(usize, usize)>>,
    }

    #[async_trait]
    impl Plugin for Counting {
        fn events(&self) -> Events {
            Events::of(&[Event::CreateContainer])
        }
        async fn synchronize(
            &self,
            pods: Vec<PodSandbox>,
            containers: Vec<Container>,
        ) -> Vec<ContainerUpdate> {
            self.synced
                .lock()
                .unwrap()
                .push((pods.len(), containers.len()));
            vec![ContainerUpdate {
                container_id: "c1".into(),
                ..Default::default()
            }]
        }
        async fn create_container(&self, req: CreateContainerRequest) -> CreateContainerResponse {
            let name = req.container.map(|c| c.name).unwrap_or_default();
            CreateContainerResponse {
                adjust: Some(ContainerAdjustment {
                    linux: Some(LinuxContainerAdjustment {
                        resources: Some(LinuxResources {
                            unified: [("memory.high".to_string(), name)].into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }
        }
    }

    fn dispatch() -> (Arc<Dispatch>, Arc<Counting>) {
        let plugin = Arc::new(Counting {
            synced: Mutex::default(),
        });
        let (tx, _) = tokio::sync::watch::channel(None);
        (Dispatch::new(plugin.clone(), tx), plugin)
    }

    #[tokio::test]
    async fn synchronize_joins_chunks_and_answers_more_without_updates() {
        let (d, plugin) = dispatch();
        let chunk = |pods: usize, more: bool| SynchronizeRequest {
            pods: vec![PodSandbox::default(); pods],
            containers: vec![Container::default(); pods * 2],
            more,
        };
        for more_chunk in [chunk(3, true), chunk(2, true)] {
            let bytes = d
                .answer(Method::Synchronize, &more_chunk.encode_to_vec())
                .await
                .unwrap();
            let answer = SynchronizeResponse::decode(bytes.as_slice()).unwrap();
            assert!(answer.more && answer.update.is_empty());
        }
        assert!(plugin.synced.lock().unwrap().is_empty());
        let bytes = d
            .answer(Method::Synchronize, &chunk(1, false).encode_to_vec())
            .await
            .unwrap();
        let answer = SynchronizeResponse::decode(bytes.as_slice()).unwrap();
        assert!(!answer.more);
        assert_eq!(answer.update.len(), 1);
        assert_eq!(*plugin.synced.lock().unwrap(), vec![(6, 12)]);
        // A later synchronization (a reconnect) starts from nothing.
        d.answer(Method::Synchronize, &chunk(1, false).encode_to_vec())
            .await
            .unwrap();
        assert_eq!(plugin.synced.lock().unwrap()[1], (1, 2));
    }

    #[tokio::test]
    async fn configure_subscribes_and_create_container_is_the_plugins_answer() {
        let (d, _) = dispatch();
        let bytes = d
            .answer(
                Method::Configure,
                &ConfigureRequest::default().encode_to_vec(),
            )
            .await
            .unwrap();
        assert_eq!(
            ConfigureResponse::decode(bytes.as_slice()).unwrap().events,
            1 << 3
        );
        let req = CreateContainerRequest {
            container: Some(Container {
                name: "app".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = d
            .answer(Method::CreateContainer, &req.encode_to_vec())
            .await
            .unwrap();
        let answer = CreateContainerResponse::decode(bytes.as_slice()).unwrap();
        let unified = answer
            .adjust
            .unwrap()
            .linux
            .unwrap()
            .resources
            .unwrap()
            .unified;
        assert_eq!(unified["memory.high"], "app");
    }

    #[tokio::test]
    async fn a_request_that_does_not_decode_is_an_error_not_a_panic() {
        let (d, _) = dispatch();
        assert!(d
            .answer(Method::CreateContainer, &[0xff, 0xff, 0xff])
            .await
            .is_err());
    }
}
