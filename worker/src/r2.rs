//! The shard's host in Workers: the R2 bucket as its object store, and the Worker's clock
//! (which in production advances only with I/O).

use cobordism_shard::{Chunk, Host, ObjectBody, ShardError, StoreError, StoredObject};
use futures_util::StreamExt;
use js_sys::Uint8Array;
use wasm_bindgen::JsCast;
use wasm_streams::readable::IntoStream;
use worker::{Bucket, Env, Range, ResponseBody};

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

/// An R2 object's body as a stream of chunks (none for an empty object), read from the
/// runtime's `ReadableStream` as they come.
pub struct R2Body(Option<IntoStream<'static>>);

/// A chunk as the runtime hands it out: copied once, into its place in the slice.
pub struct R2Chunk(Uint8Array);

impl Chunk for R2Chunk {
    fn len(&self) -> usize {
        self.0.length() as usize
    }

    fn copy_to(&self, dst: &mut [u8]) {
        self.0.copy_to(dst);
    }
}

impl ObjectBody for R2Body {
    type Chunk = R2Chunk;

    async fn next_chunk(&mut self) -> Result<Option<R2Chunk>, StoreError> {
        let Some(stream) = &mut self.0 else {
            return Ok(None);
        };
        match stream.next().await.transpose() {
            Ok(chunk) => Ok(chunk.map(|c| R2Chunk(c.unchecked_into()))),
            Err(e) => Err(failed(e.into())),
        }
    }
}

/// An R2 object as the shard reads it: etag, whole size, body stream.
fn streamed(object: worker::Object) -> Result<StoredObject<R2Body>, StoreError> {
    let body = match object.body().map(|b| b.response_body()).transpose() {
        Ok(None) => None,
        Ok(Some(ResponseBody::Stream(s))) => {
            Some(wasm_streams::ReadableStream::from_raw(s.unchecked_into()).into_stream())
        }
        Ok(Some(_)) => return Err(StoreError("R2 gave a body that is not a stream".into())),
        Err(e) => return Err(failed(e)),
    };
    Ok(StoredObject {
        etag: object.etag(),
        size: object.size(),
        body: R2Body(body),
    })
}

impl Host for R2 {
    type Body = R2Body;

    fn log(&self, line: &str) {
        crate::telemetry::log(line);
    }

    async fn etag(&self, key: &str) -> Result<Option<String>, StoreError> {
        let object = self.0.head(key).await.map_err(failed)?;
        Ok(object.map(|o| o.etag()))
    }

    async fn get(&self, key: &str) -> Result<Option<StoredObject<R2Body>>, StoreError> {
        let object = self.0.get(key).execute().await.map_err(failed)?;
        object.map(streamed).transpose()
    }

    async fn get_range(
        &self,
        key: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<StoredObject<R2Body>>, StoreError> {
        let range = Range::OffsetWithLength {
            offset: start,
            length: len,
        };
        let object = self
            .0
            .get(key)
            .range(range)
            .execute()
            .await
            .map_err(failed)?;
        object.map(streamed).transpose()
    }

    fn now_ms(&self) -> f64 {
        js_sys::Date::now()
    }
}
