//! The shard's host in Workers: the R2 bucket as its object store, and the Worker's clock
//! (which in production advances only with I/O).

use cobordism_shard::{Host, Object, ObjectBody, ShardError, StoreError};
use futures_util::StreamExt;
use worker::{Bucket, ByteStream, Env, Range};

/// Name of the R2 binding holding manifests and slices.
pub const BUCKET_BINDING: &str = "LM_HEAD";

/// The R2 binding.
pub struct R2(Bucket);

impl R2 {
    /// The bucket bound as [`BUCKET_BINDING`].
    pub fn from_env(env: &Env) -> Result<R2, ShardError> {
        env.bucket(BUCKET_BINDING)
            .map(R2)
            .map_err(|_| ShardError::config(format!("the R2 binding {BUCKET_BINDING} is missing")))
    }
}

fn failed(e: worker::Error) -> StoreError {
    StoreError(e.to_string())
}

/// An R2 object's body as a stream of chunks (none for an empty object).
pub struct R2Body(Option<ByteStream>);

impl ObjectBody for R2Body {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        match &mut self.0 {
            Some(stream) => stream.next().await.transpose().map_err(failed),
            None => Ok(None),
        }
    }
}

/// An R2 object as the shard reads it: etag, whole size, body stream.
fn streamed(object: worker::Object) -> Result<Object<R2Body>, StoreError> {
    let body = object
        .body()
        .map(|b| b.stream())
        .transpose()
        .map_err(failed)?;
    Ok(Object {
        etag: object.etag(),
        size: object.size(),
        body: R2Body(body),
    })
}

impl Host for R2 {
    type Body = R2Body;

    async fn etag(&self, key: &str) -> Result<Option<String>, StoreError> {
        let object = self.0.head(key).await.map_err(failed)?;
        Ok(object.map(|o| o.etag()))
    }

    async fn get(&self, key: &str) -> Result<Option<Object<R2Body>>, StoreError> {
        let object = self.0.get(key).execute().await.map_err(failed)?;
        object.map(streamed).transpose()
    }

    async fn get_range(
        &self,
        key: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<Object<R2Body>>, StoreError> {
        let range = Range::OffsetWithLength {
            offset: start,
            length: len,
        };
        let object = self.0.get(key).range(range).execute().await.map_err(failed)?;
        object.map(streamed).transpose()
    }

    fn now_ms(&self) -> f64 {
        js_sys::Date::now()
    }
}
