//! The answer's HTTP headers: their names, written once for the shard that sets them and the
//! clients that check them (the CLI, and `@cobordism/client` through `client-js`), and
//! [`AnswerHeaders::pairs`], the one place that turns an answer's facts into header values,
//! including the `Server-Timing` rule.

/// The names of the headers of `POST /cobordism-lm-head`'s answers and requests.
pub mod header {
    /// The shard's position in the deployment.
    pub const SHARD_INDEX: &str = "X-Shard-Index";
    /// Shards in the deployment.
    pub const SHARD_COUNT: &str = "X-Shard-Count";
    /// Rows of the whole lm-head.
    pub const VOCAB: &str = "X-Vocab";
    /// The slice's first row (token id).
    pub const ROW_START: &str = "X-Row-Start";
    /// Rows of the slice.
    pub const ROW_COUNT: &str = "X-Row-Count";
    /// Hidden vectors in the request.
    pub const BATCH: &str = "X-Batch";
    /// Vectors in the pass that computed the answer (this request's and others').
    pub const PASS_VECTORS: &str = "X-Pass-Vectors";
    /// `exact` or `int8`.
    pub const PRECISION: &str = "X-Precision";
    /// The manifest version the logits come from.
    pub const MANIFEST_VERSION: &str = "X-Manifest-Version";
    /// `hit` when the slice was resident, `miss` when this request loaded it, `wait` when it
    /// waited for another request's load.
    pub const CACHE: &str = "X-Cache";
    /// `load;dur=MS[, compute;dur=MS]`.
    pub const SERVER_TIMING: &str = "Server-Timing";
    /// The reply form's name ([`crate::Form::name`]).
    pub const REPLY: &str = "X-Reply";
    /// `K` of a top-K answer.
    pub const TOP_K: &str = "X-Top-K";
    /// Seconds after which a retry can succeed (503s that waiting can help).
    pub const RETRY_AFTER: &str = "Retry-After";
    /// `Bearer TOKEN`.
    pub const AUTHORIZATION: &str = "Authorization";
    /// The scheme a 401 asks for (`Bearer`).
    pub const WWW_AUTHENTICATE: &str = "WWW-Authenticate";
    /// The methods a 405 allows.
    pub const ALLOW: &str = "Allow";
    /// `application/octet-stream` (answers, request bodies) or `application/json` (errors).
    pub const CONTENT_TYPE: &str = "Content-Type";
    /// `no-store` on every answer.
    pub const CACHE_CONTROL: &str = "Cache-Control";
    /// A request body's declared length.
    pub const CONTENT_LENGTH: &str = "Content-Length";
    /// A request body sent in chunks.
    pub const TRANSFER_ENCODING: &str = "Transfer-Encoding";
    /// A caller's session key: with object residency, which replica of the shard serves it.
    pub const SESSION: &str = "X-Cobordism-Session";
    /// On a front's forward to its object and on the object's answer: the forward's version
    /// (`cobordism_shard::object::FORWARD_VERSION`), so that builds of a rollout meet safely.
    pub const FORWARD: &str = "X-Cobordism-Forward";
    /// Beside [`FORWARD`]: the sender's build, named when the two do not match.
    pub const BUILD: &str = "X-Cobordism-Build";
}

/// How a request found the slice (`X-Cache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cache {
    /// Resident when the request came.
    Hit,
    /// Another request was loading it: this one waited for that load.
    Wait,
    /// This request loaded it.
    Miss,
}

impl Cache {
    /// The header's value.
    pub fn name(self) -> &'static str {
        match self {
            Cache::Hit => "hit",
            Cache::Wait => "wait",
            Cache::Miss => "miss",
        }
    }
}

/// What an answer's headers say, for [`AnswerHeaders::pairs`].
#[derive(Clone, Debug, PartialEq)]
pub struct AnswerHeaders<'a> {
    /// The shard's position and the deployment's shard count.
    pub shard_index: usize,
    /// Shards in the deployment.
    pub shard_count: usize,
    /// Rows of the whole lm-head.
    pub vocab: usize,
    /// The slice's first row.
    pub row_start: usize,
    /// Rows of the slice.
    pub row_count: usize,
    /// Hidden vectors in the request.
    pub batch: usize,
    /// Vectors in the pass that computed it.
    pub pass_vectors: usize,
    /// The precision's name.
    pub precision: &'static str,
    /// The manifest version.
    pub manifest_version: &'a str,
    /// How the request found the slice.
    pub cache: Cache,
    /// Milliseconds this request spent loading the slice, or waiting for another's load.
    pub load_ms: f64,
    /// Milliseconds of compute as the host's clock saw them: in production the clock stands
    /// still while a Worker computes, so a 0 is left out rather than reported as a time.
    pub compute_ms: f64,
    /// The reply form's name and, for top-K, its `K`.
    pub reply: &'static str,
    /// `K` of a top-K answer.
    pub top_k: Option<usize>,
}

impl AnswerHeaders<'_> {
    /// The answer's headers, name and value, in a fixed order.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut timing = format!("load;dur={:.0}", self.load_ms);
        if self.compute_ms > 0.0 {
            timing.push_str(&format!(", compute;dur={:.0}", self.compute_ms));
        }
        let mut pairs = vec![
            (header::SHARD_INDEX, self.shard_index.to_string()),
            (header::SHARD_COUNT, self.shard_count.to_string()),
            (header::VOCAB, self.vocab.to_string()),
            (header::ROW_START, self.row_start.to_string()),
            (header::ROW_COUNT, self.row_count.to_string()),
            (header::BATCH, self.batch.to_string()),
            (header::PASS_VECTORS, self.pass_vectors.to_string()),
            (header::PRECISION, self.precision.to_string()),
            (header::MANIFEST_VERSION, self.manifest_version.to_string()),
            (header::CACHE, self.cache.name().to_string()),
            (header::SERVER_TIMING, timing),
            (header::REPLY, self.reply.to_string()),
        ];
        if let Some(k) = self.top_k {
            pairs.push((header::TOP_K, k.to_string()));
        }
        pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> AnswerHeaders<'static> {
        AnswerHeaders {
            shard_index: 3,
            shard_count: 8,
            vocab: 152064,
            row_start: 57024,
            row_count: 19008,
            batch: 2,
            pass_vectors: 5,
            precision: "int8",
            manifest_version: "v1",
            cache: Cache::Hit,
            load_ms: 0.0,
            compute_ms: 0.0,
            reply: "logits",
            top_k: None,
        }
    }

    fn value(pairs: &[(&'static str, String)], name: &str) -> Option<String> {
        pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }

    #[test]
    fn every_fact_has_its_header() {
        let pairs = answer().pairs();
        let got: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (*n, v.as_str())).collect();
        assert_eq!(
            got,
            [
                ("X-Shard-Index", "3"),
                ("X-Shard-Count", "8"),
                ("X-Vocab", "152064"),
                ("X-Row-Start", "57024"),
                ("X-Row-Count", "19008"),
                ("X-Batch", "2"),
                ("X-Pass-Vectors", "5"),
                ("X-Precision", "int8"),
                ("X-Manifest-Version", "v1"),
                ("X-Cache", "hit"),
                ("Server-Timing", "load;dur=0"),
                ("X-Reply", "logits"),
            ]
        );
        let top = AnswerHeaders {
            cache: Cache::Miss,
            reply: "top_k",
            top_k: Some(40),
            ..answer()
        }
        .pairs();
        assert_eq!(value(&top, header::CACHE).as_deref(), Some("miss"));
        assert_eq!(value(&top, header::TOP_K).as_deref(), Some("40"));
    }

    #[test]
    fn compute_time_is_reported_only_when_the_clock_moved() {
        let still = AnswerHeaders {
            load_ms: 812.4,
            ..answer()
        };
        assert_eq!(
            value(&still.pairs(), header::SERVER_TIMING).as_deref(),
            Some("load;dur=812")
        );
        let moved = AnswerHeaders {
            compute_ms: 21.6,
            ..still
        };
        assert_eq!(
            value(&moved.pairs(), header::SERVER_TIMING).as_deref(),
            Some("load;dur=812, compute;dur=22")
        );
    }
}
