//! presso-objects: Presso's client of S3-compatible object stores (AWS S3, Ceph RGW, MinIO,
//! SeaweedFS), for keeping a pool's records as immutable objects.
//!
//! [`Objects`] is a blocking facade over Apache Arrow's `object_store` crate (its S3 client),
//! on a small runtime of its own, so the file-system layer, which is synchronous, calls it like
//! a file: put an object whole ([`Objects::put`], multipart above [`ObjectOptions::part_size`]),
//! read a byte range of one ([`Objects::get_range`], checked to be as long as asked), its size,
//! a listing under the pool's prefix, a delete. Every request is retried with exponential
//! backoff on timeouts, connection failures and server errors (5xx, 429), each attempt bounded
//! by a timeout, the whole operation by [`ObjectOptions::retry_timeout`]; what still fails is an
//! [`ObjectError`] that says what to do. `object_store` reports each retry as a `tracing` event
//! (target `object_store`), which the file-system layer shows.
//!
//! Why `object_store`: it is the S3 client of the Rust data ecosystem (DataFusion, Delta Lake,
//! InfluxDB), speaks plain S3 to any compatible server (path-style requests to a custom
//! endpoint), and has the retries, timeouts, range reads and multipart uploads this needs built
//! in; the AWS SDK is larger, tied to AWS's own configuration, and adds nothing used here.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
    WriteMultipart,
};

pub mod segments;

#[cfg(feature = "test-server")]
pub mod fault_proxy;
#[cfg(feature = "test-server")]
pub mod test_server;

/// What went wrong with an object store request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// The object does not exist.
    #[error("object {0} not found")]
    NotFound(String),
    /// A read returned fewer bytes than the object holds there: a truncated response.
    #[error("object {name}: asked for {expected} bytes at {offset}, got {got}")]
    Truncated {
        /// The object.
        name: String,
        /// Where the read began.
        offset: u64,
        /// Bytes asked for.
        expected: u64,
        /// Bytes received.
        got: u64,
    },
    /// The store refused the credentials or the access (HTTP 401 or 403).
    #[error("object store refused access: {0} (check the credentials and the bucket's policy)")]
    Denied(String),
    /// The store could not be reached or kept failing until the retries ran out: a later retry
    /// may succeed.
    #[error("object store unavailable: {0}")]
    Unavailable(String),
    /// The URL or the options are wrong.
    #[error("object store configuration: {0}")]
    Config(String),
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, ObjectError>;

/// Where a pool's objects live: `s3://BUCKET/PREFIX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectUrl {
    /// The bucket.
    pub bucket: String,
    /// The key prefix of the pool's objects, without leading or trailing `/` (may be empty).
    pub prefix: String,
}

impl ObjectUrl {
    /// Reads `s3://BUCKET` or `s3://BUCKET/PREFIX`.
    pub fn parse(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| ObjectError::Config(format!("{url:?} is not an s3:// URL")))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Err(ObjectError::Config(format!(
                "{bucket:?} is not a bucket name (3 to 63 of a-z, 0-9, '-' and '.')"
            )));
        }
        let prefix = prefix.trim_matches('/').to_string();
        if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains("//") {
            return Err(ObjectError::Config(format!(
                "{prefix:?}: a prefix cannot have empty, '.' or '..' parts"
            )));
        }
        Ok(ObjectUrl {
            bucket: bucket.to_string(),
            prefix,
        })
    }
}

/// Reads a data location as a shared pool keeps it, `s3://BUCKET[/PREFIX][?endpoint=URL]
/// [&region=NAME]`: where the objects are and how to reach the server (AWS S3 when no endpoint
/// is given). Credentials never appear in it: they come from `AWS_ACCESS_KEY_ID` and
/// `AWS_SECRET_ACCESS_KEY` (see [`ObjectOptions::credentials`]).
pub fn locate(location: &str) -> Result<(ObjectUrl, ObjectOptions)> {
    let (url, query) = location.split_once('?').unwrap_or((location, ""));
    let mut opts = ObjectOptions::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("endpoint", v)) if v.starts_with("http://") || v.starts_with("https://") => {
                opts.endpoint = Some(v.trim_end_matches('/').to_string());
            }
            Some(("region", v)) if !v.is_empty() => opts.region = v.to_string(),
            _ => {
                return Err(ObjectError::Config(format!(
                    "{pair:?} in {location:?}: the parameters are endpoint=http(s)://HOST:PORT \
                     and region=NAME; credentials go in AWS_ACCESS_KEY_ID and \
                     AWS_SECRET_ACCESS_KEY"
                )))
            }
        }
    }
    Ok((ObjectUrl::parse(url)?, opts))
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// How to reach the store and how hard to try.
#[derive(Debug, Clone)]
pub struct ObjectOptions {
    /// The server, e.g. `http://127.0.0.1:8333` (SeaweedFS, MinIO, Ceph RGW); `None` is AWS S3
    /// in [`ObjectOptions::region`]. Requests are path-style (`ENDPOINT/BUCKET/KEY`) when set.
    pub endpoint: Option<String>,
    /// The region the requests are signed for.
    pub region: String,
    /// Access key id and secret; `None` takes `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`
    /// from the environment, and without those sends unsigned requests (a store that allows
    /// anonymous access).
    pub credentials: Option<(String, String)>,
    /// Longest one request may take.
    pub request_timeout: Duration,
    /// Longest a connection attempt may take.
    pub connect_timeout: Duration,
    /// Most retries of a failed request (timeouts, connection failures, 5xx, 429). The default
    /// is high enough that [`ObjectOptions::retry_timeout`] decides: a refused connection fails
    /// in microseconds, and a restarting server refuses them for tens of seconds.
    pub max_retries: usize,
    /// Longest an operation may keep retrying: how long a store may be down before operations
    /// fail.
    pub retry_timeout: Duration,
    /// Objects larger than this are uploaded in parts of this size (S3's minimum part is 5 MiB).
    pub part_size: usize,
}

impl Default for ObjectOptions {
    fn default() -> Self {
        ObjectOptions {
            endpoint: None,
            region: "us-east-1".into(),
            credentials: None,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_retries: 1000,
            retry_timeout: Duration::from_secs(120),
            part_size: 8 << 20,
        }
    }
}

/// A pool's objects in one bucket under one prefix.
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    url: ObjectUrl,
    part_size: usize,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects").field("url", &self.url).finish()
    }
}

impl Objects {
    /// A client of the objects at `url`. Nothing is sent yet: a wrong endpoint or credentials
    /// show at the first request.
    pub fn connect(url: &ObjectUrl, opts: &ObjectOptions) -> Result<Self> {
        if opts.part_size < 5 << 20 {
            return Err(ObjectError::Config(format!(
                "part size {} is below S3's minimum of 5 MiB",
                opts.part_size
            )));
        }
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&url.bucket)
            .with_region(&opts.region)
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(50),
                    max_backoff: Duration::from_secs(5),
                    base: 2.0,
                },
                max_retries: opts.max_retries,
                retry_timeout: opts.retry_timeout,
            })
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(opts.request_timeout)
                    .with_connect_timeout(opts.connect_timeout)
                    .with_allow_http(true),
            );
        if let Some(endpoint) = &opts.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false);
        }
        let from_env = std::env::var_os("AWS_ACCESS_KEY_ID").is_some();
        match &opts.credentials {
            Some((id, secret)) => {
                builder = builder
                    .with_access_key_id(id)
                    .with_secret_access_key(secret)
            }
            None if !from_env => builder = builder.with_skip_signature(true),
            None => {}
        }
        let store = builder
            .build()
            .map_err(|e| ObjectError::Config(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("presso-s3")
            .enable_all()
            .build()
            .map_err(|e| ObjectError::Config(format!("cannot start the client's threads: {e}")))?;
        Ok(Objects {
            store: Arc::new(store),
            url: url.clone(),
            part_size: opts.part_size,
            runtime,
        })
    }

    /// Where the objects live.
    pub fn url(&self) -> &ObjectUrl {
        &self.url
    }

    fn path(&self, name: &str) -> ObjectPath {
        if self.url.prefix.is_empty() {
            ObjectPath::from(name)
        } else {
            ObjectPath::from(format!("{}/{name}", self.url.prefix))
        }
    }

    /// Stores `bytes` as object `name` (replacing one of that name), in parts when larger than
    /// the part size. Returns once the store has it durably: S3 answers a put only then.
    pub fn put(&self, name: &str, bytes: Bytes) -> Result<()> {
        let path = self.path(name);
        let err = |e| classify(name, e);
        self.runtime.block_on(async {
            if bytes.len() <= self.part_size {
                self.store
                    .put(&path, PutPayload::from(bytes))
                    .await
                    .map_err(err)?;
                return Ok(());
            }
            let upload = self.store.put_multipart(&path).await.map_err(err)?;
            let mut parts = WriteMultipart::new_with_chunk_size(upload, self.part_size);
            let mut rest = bytes;
            while !rest.is_empty() {
                let n = rest.len().min(self.part_size);
                parts.wait_for_capacity(4).await.map_err(err)?;
                parts.put(rest.split_to(n));
            }
            // A failed upload is aborted by `finish`, so no parts are left behind.
            parts.finish().await.map_err(err)?;
            Ok(())
        })
    }

    /// The bytes of object `name` in `range`, exactly as many as asked (else
    /// [`ObjectError::Truncated`]).
    pub fn get_range(&self, name: &str, range: Range<u64>) -> Result<Bytes> {
        let path = self.path(name);
        let expected = range.end.saturating_sub(range.start);
        let offset = range.start;
        let got = self
            .runtime
            .block_on(self.store.get_range(&path, range))
            .map_err(|e| classify(name, e))?;
        if got.len() as u64 != expected {
            return Err(ObjectError::Truncated {
                name: name.to_string(),
                offset,
                expected,
                got: got.len() as u64,
            });
        }
        Ok(got)
    }

    /// The whole of object `name`, checked against its listed size.
    pub fn get(&self, name: &str) -> Result<Bytes> {
        let path = self.path(name);
        let err = |e| classify(name, e);
        self.runtime.block_on(async {
            let result = self.store.get(&path).await.map_err(err)?;
            let size = result.meta.size;
            let bytes = result.bytes().await.map_err(err)?;
            if bytes.len() as u64 != size {
                return Err(ObjectError::Truncated {
                    name: name.to_string(),
                    offset: 0,
                    expected: size,
                    got: bytes.len() as u64,
                });
            }
            Ok(bytes)
        })
    }

    /// The size of object `name`.
    pub fn size(&self, name: &str) -> Result<u64> {
        let path = self.path(name);
        let meta = self
            .runtime
            .block_on(self.store.head(&path))
            .map_err(|e| classify(name, e))?;
        Ok(meta.size)
    }

    /// Deletes object `name`; a missing one is not an error.
    pub fn delete(&self, name: &str) -> Result<()> {
        let path = self.path(name);
        match self.runtime.block_on(self.store.delete(&path)) {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(classify(name, e)),
        }
    }

    /// Names and sizes of every object under the prefix (names relative to it), in name order.
    pub fn list(&self) -> Result<Vec<(String, u64)>> {
        self.list_under("")
    }

    /// Like [`Objects::list`], for the objects whose names (relative to the prefix) begin with
    /// the path `under/` only (all of them for an empty `under`).
    pub fn list_under(&self, under: &str) -> Result<Vec<(String, u64)>> {
        let full = match (self.url.prefix.is_empty(), under.is_empty()) {
            (true, true) => String::new(),
            (true, false) => under.to_string(),
            (false, true) => self.url.prefix.clone(),
            (false, false) => format!("{}/{under}", self.url.prefix),
        };
        let prefix = (!full.is_empty()).then(|| ObjectPath::from(full.as_str()));
        let metas: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(self.store.list(prefix.as_ref()).try_collect())
            .map_err(|e| classify("(listing)", e))?;
        let strip = if self.url.prefix.is_empty() {
            0
        } else {
            self.url.prefix.len() + 1
        };
        let mut out: Vec<(String, u64)> = metas
            .into_iter()
            .filter_map(|m| {
                let name = m.location.as_ref().get(strip..)?.to_string();
                Some((name, m.size))
            })
            .collect();
        out.sort();
        Ok(out)
    }
}

/// Turns an `object_store` failure on object `name` into an [`ObjectError`].
fn classify(name: &str, e: object_store::Error) -> ObjectError {
    match e {
        object_store::Error::NotFound { .. } => ObjectError::NotFound(name.to_string()),
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            ObjectError::Denied(format!("{name}: {e}"))
        }
        object_store::Error::InvalidPath { .. }
        | object_store::Error::NotSupported { .. }
        | object_store::Error::NotImplemented { .. }
        | object_store::Error::UnknownConfigurationKey { .. } => {
            ObjectError::Config(format!("{name}: {e}"))
        }
        // S3's error codes are part of its API: a missing bucket is a configuration error,
        // not an outage.
        e if e.to_string().contains("<Code>NoSuchBucket</Code>") => ObjectError::Config(format!(
            "the bucket does not exist: create it first (for example `aws s3 mb s3://BUCKET`, \
             or your store's console), then try again ({name}: {e})"
        )),
        // Timeouts, refused connections, 5xx after the retries: a later try (or a fixed
        // server) may succeed.
        e => ObjectError::Unavailable(format!("{name}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_bucket_and_prefix() {
        let u = ObjectUrl::parse("s3://my-bucket/pools/lab1/").unwrap();
        assert_eq!(u.bucket, "my-bucket");
        assert_eq!(u.prefix, "pools/lab1");
        assert_eq!(u.to_string(), "s3://my-bucket/pools/lab1");
        let u = ObjectUrl::parse("s3://bkt").unwrap();
        assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("bkt", ""));
        assert_eq!(u.to_string(), "s3://bkt");
    }

    #[test]
    fn bad_urls_are_refused() {
        for url in [
            "http://bkt/x",
            "s3://",
            "s3://ab/x",
            "s3://Upper/x",
            "s3://bkt/a//b",
            "s3://bkt/a/../b",
            "s3://bkt/./b",
        ] {
            assert!(
                matches!(ObjectUrl::parse(url), Err(ObjectError::Config(_))),
                "{url}"
            );
        }
    }

    #[test]
    fn locations_give_url_endpoint_and_region_never_credentials() {
        let (u, o) = locate("s3://bkt/p/q?endpoint=http://127.0.0.1:8333/&region=eu-1").unwrap();
        assert_eq!(u.to_string(), "s3://bkt/p/q");
        assert_eq!(o.endpoint.as_deref(), Some("http://127.0.0.1:8333"));
        assert_eq!(o.region, "eu-1");
        let (u, o) = locate("s3://bkt").unwrap();
        assert_eq!((u.prefix.as_str(), o.endpoint), ("", None));
        for bad in [
            "s3://bkt?endpoint=127.0.0.1:8333",
            "s3://bkt?secret=x",
            "s3://bkt?region=",
            "s3://BKT?region=x",
        ] {
            assert!(matches!(locate(bad), Err(ObjectError::Config(_))), "{bad}");
        }
    }

    #[test]
    fn parts_below_the_minimum_are_refused() {
        let opts = ObjectOptions {
            part_size: 1 << 20,
            ..ObjectOptions::default()
        };
        let url = ObjectUrl::parse("s3://bkt/p").unwrap();
        assert!(matches!(
            Objects::connect(&url, &opts),
            Err(ObjectError::Config(_))
        ));
    }
}
