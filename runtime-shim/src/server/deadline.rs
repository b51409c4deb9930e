//! Client deadlines, answered as grpc-go answers them: an RPC still running when the deadline its
//! client sent (`grpc-timeout`) expires is dropped and answered DEADLINE_EXCEEDED.
//!
//! tonic's server enforces `grpc-timeout` itself in a layer outside every service (GrpcTimeout) and
//! answers CANCELLED. With a short deadline that answer reaches the client before its own timer fires,
//! so the client reports CANCELLED where containerd's (grpc-go) would say DEADLINE_EXCEEDED — critest's
//! "public image should timeout if requested" then failed now and then. The header is therefore
//! renamed to [`HEADER`] on the way in (by [`super::authority`]'s transcoder, which already rewrites
//! every header block), so tonic never sees it, and [`DeadlineLayer`] enforces it here. The value's
//! format is gRPC's (`TimeoutValue TimeoutUnit`, at most 8 digits; PROTOCOL-HTTP2.md); tonic's parser
//! is private, so it is parsed here.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// What `grpc-timeout` is renamed to before tonic reads the request.
pub const HEADER: &str = "keel-grpc-timeout";

/// The message of the answer, grpc-go's.
const MESSAGE: &str = "context deadline exceeded";

/// `grpc-timeout`'s value as a duration: `None` when it is not gRPC's format.
pub fn parse(value: &str) -> Option<Duration> {
    let split = value.len().checked_sub(1)?;
    let (digits, unit) = (value.get(..split)?, value.get(split..)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Wraps the CRI services in [`Deadline`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// Runs each request within the deadline its client sent (see the module docs).
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for Deadline<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let deadline = request.headers().get(HEADER).and_then(|v| v.to_str().ok()).and_then(parse);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let Some(deadline) = deadline else { return answer.await };
            match tokio::time::timeout(deadline, answer).await {
                Ok(answer) => answer,
                Err(_) => Ok(tonic::Status::deadline_exceeded(MESSAGE).into_http()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_in_every_unit_and_nonsense_does_not() {
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse("120S"), Some(Duration::from_secs(120)));
        assert_eq!(parse("999u"), Some(Duration::from_micros(999)));
        assert_eq!(parse("5m"), Some(Duration::from_millis(5)));
        assert_eq!(parse("12345678n"), Some(Duration::from_nanos(12_345_678)));
        for bad in ["", "S", "123456789S", "10x", "-1S", "1.5S", "é"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_rpc_past_its_deadline_is_deadline_exceeded_and_one_within_it_is_answered() {
        use tower::{Layer, Service, ServiceExt};
        let slow = tower::service_fn(|_: http::Request<()>| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::empty()))
        });
        let mut service = DeadlineLayer.layer(slow);
        let request = |timeout: Option<&str>| {
            let mut request = http::Request::new(());
            if let Some(timeout) = timeout {
                request.headers_mut().insert(HEADER, timeout.parse().unwrap());
            }
            request
        };
        let answer = service.ready().await.unwrap().call(request(Some("1m"))).await.unwrap();
        let status = tonic::Status::from_header_map(answer.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(status.message(), MESSAGE);
        let answer = service.ready().await.unwrap().call(request(Some("20S"))).await.unwrap();
        assert!(tonic::Status::from_header_map(answer.headers()).is_none(), "answered in time");
        let answer = service.ready().await.unwrap().call(request(None)).await.unwrap();
        assert!(tonic::Status::from_header_map(answer.headers()).is_none(), "no deadline");
    }
}
