//! A scripted Kubernetes API for the loops of the controller and the agent
//! (`nodemem_controller::run::Controller`, `nodemem_agent::node_sync::NodeSync`): a
//! `tower` service in the test's process that answers the requests their watches and
//! writes make, the way kube-rs's controller-rs tests its reconciler against a scripted
//! API (there with `tower-test`; here a small store, because the loops' watches run side
//! by side and ask in no fixed order).
//!
//! It keeps what a kube-apiserver keeps for these tests: objects by resource and name
//! with a resourceVersion, lists, watches that stay open and hear every change (the
//! writes echo as watch events, as the apiserver's do), field selectors on `metadata.name`
//! and `spec.nodeName`, metadata-only resources, server-side applies merged the simple
//! way these objects need (a whole spec, a status, a finalizer list). Every request is
//! recorded for the test to read. A list can be held back until the test lets it go, to
//! show what a loop does before its lists are whole. It is no apiserver: the real one
//! judges the product in the control-plane tests; this one lets a loop's wiring be
//! tested in a unit test.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

/// The resources the loops read and write, by their path's last segment.
pub const POLICIES: &str = "nodememorypolicies";
pub const CONFIGS: &str = "nodememoryconfigs";
pub const NODES: &str = "nodes";
pub const PODS: &str = "pods";
pub const NAMESPACES: &str = "namespaces";

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// One request as the client sent it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The query's parameters.
    pub query: BTreeMap<String, String>,
    pub content_type: String,
    /// The body, parsed (Null when empty).
    pub body: Value,
}

#[derive(Default)]
struct Store {
    version: u64,
    /// resource -> name -> object.
    objects: BTreeMap<&'static str, BTreeMap<String, Value>>,
    /// resource -> the open watches.
    watches: BTreeMap<&'static str, Vec<Watch>>,
    /// The resources served as metadata only (`PartialObjectMetadata`).
    metadata_only: BTreeSet<&'static str>,
    requests: Vec<Recorded>,
}

/// An open watch: where its events go, and the field selector it was opened with.
struct Watch {
    events: mpsc::UnboundedSender<Bytes>,
    selector: Option<(String, String)>,
}

/// The scripted API; cheap to clone (one store).
#[derive(Clone)]
pub struct Api {
    store: Arc<Mutex<Store>>,
    /// Lists of these resources wait until the test lets them go.
    held: Arc<watch::Sender<BTreeSet<&'static str>>>,
}

impl Api {
    /// An API holding `objects` (resource, object), the lists of `held` waiting for
    /// [`Api::release`], the resources of `metadata_only` served as metadata (as the
    /// loops ask for them).
    pub fn new(
        objects: Vec<(&'static str, Value)>,
        held: &[&'static str],
        metadata_only: &[&'static str],
    ) -> Api {
        let api = Api {
            store: Arc::default(),
            held: Arc::new(watch::Sender::new(held.iter().copied().collect())),
        };
        api.store.lock().unwrap().metadata_only = metadata_only.iter().copied().collect();
        for (resource, object) in objects {
            api.put(resource, object);
        }
        api
    }

    /// A kube client whose every request this API answers.
    pub fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.answer(request).await) }
        });
        kube::Client::new(service, "default")
    }

    /// Lets the held lists of `resource` answer.
    pub fn release(&self, resource: &'static str) {
        self.held.send_modify(|held| {
            held.remove(resource);
        });
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.store.lock().unwrap().requests.clone()
    }

    /// The stored object, if any.
    pub fn object(&self, resource: &'static str, name: &str) -> Option<Value> {
        let store = self.store.lock().unwrap();
        store.objects.get(resource)?.get(name).cloned()
    }

    /// Whether a watch of `resource` is open (its list answered).
    pub fn watching(&self, resource: &'static str) -> bool {
        let store = self.store.lock().unwrap();
        store.watches.get(resource).is_some_and(|w| !w.is_empty())
    }

    /// Stores `object` as a client's create or update would, and tells the watches.
    pub fn put(&self, resource: &'static str, mut object: Value) -> Value {
        let mut store = self.store.lock().unwrap();
        store.version += 1;
        let version = store.version.to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let existed = store
            .objects
            .get(resource)
            .is_some_and(|o| o.contains_key(&name));
        object["metadata"]["resourceVersion"] = json!(version);
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = json!(format!("uid-{resource}-{name}"));
        }
        store
            .objects
            .entry(resource)
            .or_default()
            .insert(name, object.clone());
        let kind = if existed { "MODIFIED" } else { "ADDED" };
        tell(&mut store, resource, kind, &object);
        object
    }

    /// Removes the object, as its deletion would, and tells the watches.
    pub fn delete(&self, resource: &'static str, name: &str) -> Option<Value> {
        let mut store = self.store.lock().unwrap();
        let mut object = store.objects.get_mut(resource)?.remove(name)?;
        // The deletion has a resourceVersion of its own, as the apiserver's has.
        store.version += 1;
        object["metadata"]["resourceVersion"] = json!(store.version.to_string());
        tell(&mut store, resource, "DELETED", &object);
        Some(object)
    }

    async fn answer(&self, request: Request<kube::client::Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let body = body.collect_bytes().await.unwrap_or_default();
        let query: BTreeMap<String, String> = parts
            .uri
            .query()
            .unwrap_or_default()
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let recorded = Recorded {
            method: parts.method.clone(),
            path: parts.uri.path().to_string(),
            query,
            content_type: parts
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        self.store.lock().unwrap().requests.push(recorded.clone());
        self.route(recorded).await
    }

    async fn route(&self, r: Recorded) -> Response<Body> {
        let segments: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
        let (resource, rest) = match segments.as_slice() {
            ["apis", "nodemem.io", "v1alpha1", resource, rest @ ..]
            | ["api", "v1", resource, rest @ ..] => (*resource, rest),
            ["apis", "apiextensions.k8s.io", "v1", "customresourcedefinitions", name] => {
                return crd(name);
            }
            ["apis", "events.k8s.io", "v1", "namespaces", _, "events"] => {
                return json_response(StatusCode::CREATED, &r.body);
            }
            _ => return not_found(&r.path),
        };
        let resource = match resource {
            POLICIES => POLICIES,
            CONFIGS => CONFIGS,
            NODES => NODES,
            PODS => PODS,
            NAMESPACES => NAMESPACES,
            _ => return not_found(&r.path),
        };
        let selector = r.query.get("fieldSelector").and_then(|s| field_selector(s));
        match (&r.method, rest) {
            (&Method::GET, []) if r.query.get("watch").map(String::as_str) == Some("true") => {
                self.watch(resource, selector)
            }
            (&Method::GET, []) => self.list(resource, selector.as_ref()).await,
            (&Method::PATCH, [name]) => self.apply(resource, name, &r, |stored, patch| {
                if let Some(finalizers) = patch["metadata"].get("finalizers") {
                    stored["metadata"]["finalizers"] = finalizers.clone();
                }
                for key in ["ownerReferences", "annotations"] {
                    if let Some(v) = patch["metadata"].get(key) {
                        stored["metadata"][key] = v.clone();
                    }
                }
                // A new spec is a new generation, as the apiserver counts it.
                if let Some(spec) = patch.get("spec").filter(|s| **s != stored["spec"]) {
                    stored["spec"] = spec.clone();
                    let generation = stored["metadata"]["generation"].as_i64().unwrap_or(0);
                    stored["metadata"]["generation"] = json!(generation + 1);
                }
            }),
            (&Method::PATCH, [name, "status"]) => {
                self.apply(resource, name, &r, |stored, patch| {
                    stored["status"] = patch["status"].clone();
                })
            }
            (&Method::DELETE, [name]) => match self.delete(resource, name) {
                Some(gone) => json_response(StatusCode::OK, &gone),
                None => not_found(&r.path),
            },
            _ => not_found(&r.path),
        }
    }

    /// A server-side apply: `merge` of the patch into the stored object (created from
    /// the patch when there is none and the patch is not a status).
    fn apply(
        &self,
        resource: &'static str,
        name: &str,
        r: &Recorded,
        merge: impl FnOnce(&mut Value, &Value),
    ) -> Response<Body> {
        let stored = self.object(resource, name);
        let status_only = r.path.ends_with("/status");
        let mut object = match stored {
            Some(o) => o,
            None if status_only => return not_found(&r.path),
            None => json!({"apiVersion": r.body["apiVersion"], "kind": r.body["kind"],
                "metadata": {"name": name}}),
        };
        let wanted = &r.body["metadata"]["resourceVersion"];
        if !wanted.is_null() && *wanted != object["metadata"]["resourceVersion"] {
            return status(StatusCode::CONFLICT, "the object has been modified");
        }
        merge(&mut object, &r.body);
        let object = self.put(resource, object);
        // A deleted object goes when its last finalizer does.
        let finalizers = object["metadata"]["finalizers"]
            .as_array()
            .map_or(0, Vec::len);
        if !object["metadata"]["deletionTimestamp"].is_null() && finalizers == 0 {
            self.delete(resource, name);
        }
        json_response(StatusCode::OK, &object)
    }

    async fn list(
        &self,
        resource: &'static str,
        selector: Option<&(String, String)>,
    ) -> Response<Body> {
        let mut held = self.held.subscribe();
        // Waits while the test holds this resource's lists back.
        let _ = held.wait_for(|h| !h.contains(resource)).await;
        let store = self.store.lock().unwrap();
        let metadata_only = store.metadata_only.contains(resource);
        let items: Vec<Value> = store
            .objects
            .get(resource)
            .map(|o| {
                o.values()
                    .filter(|o| selected(o, selector))
                    .map(|o| served(o, metadata_only))
                    .collect()
            })
            .unwrap_or_default();
        let kind = if metadata_only {
            "PartialObjectMetadataList"
        } else {
            "List"
        };
        json_response(
            StatusCode::OK,
            &json!({"apiVersion": "v1", "kind": kind,
                "metadata": {"resourceVersion": store.version.to_string()}, "items": items}),
        )
    }

    /// A watch that stays open and hears every later change of `resource` its
    /// selector selects.
    fn watch(&self, resource: &'static str, selector: Option<(String, String)>) -> Response<Body> {
        let (events, rx) = mpsc::unbounded_channel();
        self.store
            .lock()
            .unwrap()
            .watches
            .entry(resource)
            .or_default()
            .push(Watch { events, selector });
        let frames = futures::stream::unfold(rx, |mut rx| async move {
            let line = rx.recv().await?;
            Some((Ok::<_, Infallible>(Frame::data(line)), rx))
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(BodyExt::boxed_unsync(StreamBody::new(frames)))
            .unwrap()
    }
}

/// Tells the open watches of `resource` that select it about a change (metadata only
/// where the resource is served so).
fn tell(store: &mut Store, resource: &'static str, kind: &str, object: &Value) {
    let served = served(object, store.metadata_only.contains(resource));
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": served})).unwrap();
    line.push(b'\n');
    let line = Bytes::from(line);
    if let Some(watches) = store.watches.get_mut(resource) {
        watches.retain(|w| {
            !selected(object, w.selector.as_ref()) || w.events.send(line.clone()).is_ok()
        });
    }
}

/// The object as a client asking for `metadata_only` gets it.
fn served(object: &Value, metadata_only: bool) -> Value {
    if metadata_only {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": object["metadata"]})
    } else {
        object.clone()
    }
}

/// A field selector of one equality (`metadata.name=x`, `spec.nodeName=x`), the only
/// kind the loops send, as (field, value); None for none or another kind.
fn field_selector(query_value: &str) -> Option<(String, String)> {
    let decoded = percent_decode(query_value);
    let (field, value) = decoded.split_once('=')?;
    Some((field.to_string(), value.to_string()))
}

/// Whether `object` has the selector's field at its value.
fn selected(object: &Value, selector: Option<&(String, String)>) -> bool {
    let Some((field, value)) = selector else {
        return true;
    };
    let found = field.split('.').fold(object, |v, key| &v[key]);
    found.as_str() == Some(value.as_str())
}

/// A query value's `%XX` escapes decoded (`+` is a space).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This build's own CRD by name: the controller finds nothing missing.
fn crd(name: &str) -> Response<Body> {
    let found = nodemem_api::crdgen::crds()
        .into_iter()
        .map(|(_, crd)| crd)
        .find(|crd| crd.metadata.name.as_deref() == Some(name));
    match found {
        Some(crd) => json_response(StatusCode::OK, &serde_json::to_value(crd).unwrap()),
        None => not_found(name),
    }
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(BodyExt::boxed_unsync(Full::new(Bytes::from(
            serde_json::to_vec(body).unwrap(),
        ))))
        .unwrap()
}

fn status(code: StatusCode, message: &str) -> Response<Body> {
    json_response(
        code,
        &json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": message, "code": code.as_u16(),
            "reason": code.canonical_reason().unwrap_or_default()}),
    )
}

fn not_found(what: &str) -> Response<Body> {
    status(StatusCode::NOT_FOUND, &format!("{what} not found"))
}
