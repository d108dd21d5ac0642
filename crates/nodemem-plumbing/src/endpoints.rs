//! The HTTP endpoints every nodemem process serves: `/metrics` (OpenMetrics text),
//! `/healthz` (the process serves) and `/readyz` (it has done its job once).

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};

/// What a process exposes.
pub trait Endpoints: Send + Sync + 'static {
    fn metrics(&self) -> String;
    /// Err says why it is not ready.
    fn ready(&self) -> Result<(), &'static str>;
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_str(content_type).expect("a valid content type"),
    );
    r
}

fn route(e: &dyn Endpoints, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            e.metrics(),
        ),
        "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => match e.ready() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            Err(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("{why}\n"),
            ),
        },
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

/// Serves the endpoints on `addr` until the process ends; returns the bound address.
/// The endpoints could not be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for /metrics: {source}")]
pub struct ServeError {
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

pub async fn serve<E: Endpoints>(
    addr: SocketAddr,
    endpoints: Arc<E>,
) -> Result<SocketAddr, ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServeError { addr, source })?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let endpoints = endpoints.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let response = route(endpoints.as_ref(), &req);
                    async move { Ok::<_, std::convert::Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}
