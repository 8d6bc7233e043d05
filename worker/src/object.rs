//! Object residency in the Worker (`cobordism_shard::object` decides which object, when to keep
//! it warm and which forward versions meet): the front's forward to the shard's Durable Object,
//! and the object's own entry points, `objectFetch` and `objectAlarm`, which
//! `worker/entry.mjs`'s `ShardObject` class calls. Both sides mark the forward with their
//! version and build and refuse another version (`503 build_mismatch`). Inside the object a
//! request is served as the plain Worker serves it, on the object's isolate's slice, but for the
//! warm-up, whose request holds the load until the slice is resident (the front answers its
//! caller `202` meanwhile and holds the forward with its own `waitUntil`); keep-warm holds an
//! alarm and a timer as long.

use cobordism_protocol::wire::header;
use cobordism_protocol::ErrorCode;
use std::time::Duration;

use cobordism_shard::object::{
    forward_mismatch, probed_object, warming_report, FORWARD_TIMEOUT_MS, FORWARD_VERSION,
    WARM_ANSWER_WAIT_MS,
};
use cobordism_shard::{object_name, Event, KeepWarm, Settings, ShardError};
use futures_util::future::{select, Either};
use futures_util::FutureExt;
use wasm_bindgen::prelude::*;
use worker::worker_sys::{web_sys, DurableObjectState};
use worker::{Context, Delay, Env, Headers, Request, Response, State};

use crate::error::ApiError;
use crate::handlers::{self, Scope, BUILD};
use crate::{config, route_of, serve, telemetry, Route};

/// The Durable Object namespace binding of the shard's object class.
const BINDING: &str = "SHARD_OBJECT";

thread_local! {
    /// The keep-warm alarms' state of the objects in this isolate.
    static KEEP_WARM: KeepWarm = KeepWarm::default();
}

/// The object of this shard `req` goes to: the caller's session's, or for a probe or a warm-up
/// the replica it names (`?replica=R`: `cobordism status` asks every replica, and an upgrade
/// warms every replica).
fn object_for(req: &Request, cfg: &Settings, route: Route) -> Result<String, ApiError> {
    let session = req.headers().get(header::SESSION).ok().flatten();
    let replica = || -> Result<Option<String>, ApiError> {
        let url = req.url()?;
        let mut asked = url.query_pairs().filter(|(k, _)| k == "replica");
        Ok(asked.next().map(|(_, v)| v.into_owned()))
    };
    Ok(match route {
        Route::Health | Route::Warm => {
            probed_object(cfg, replica()?.as_deref(), session.as_deref())?
        }
        _ => object_name(cfg, session.as_deref()),
    })
}

/// Forwards `req` (access granted) to its object ([`object_for`]).
pub async fn forward(
    req: Request,
    env: &Env,
    cfg: &Settings,
    route: Route,
) -> Result<Response, ApiError> {
    let name = object_for(&req, cfg, route)?;
    let namespace = env.durable_object(BINDING).map_err(|e| {
        ShardError::config(format_args!(
            "RESIDENCY = \"object\" needs the Durable Object binding {BINDING} (deploy with \
             cobordism deploy --residency object): {e}"
        ))
    })?;
    let mut req = req.clone_mut()?;
    mark_forward(req.headers_mut()?, env)?;
    let stub = namespace.get_by_name(&name)?;
    let unavailable = |why: String| -> ApiError {
        ShardError::new(
            ErrorCode::ObjectUnavailable,
            "the shard's Durable Object failed this request (reset or moved); retry",
        )
        .with_internal(format_args!("{name}: {why}"))
        .into()
    };
    let answer = Box::pin(stub.fetch_with_request(req));
    let timeout = Delay::from(Duration::from_secs_f64(FORWARD_TIMEOUT_MS / 1000.0));
    let answered = match select(answer, timeout).await {
        Either::Left((answer, _)) => answer.map_err(|e| unavailable(e.to_string())),
        Either::Right(_) => Err(unavailable(format!(
            "no answer in {} s",
            FORWARD_TIMEOUT_MS / 1000.0
        ))),
    };
    let answer = answered?;
    match mismatch(answer.headers(), env) {
        Some(e) => Err(e.into()),
        None => Ok(answer),
    }
}

/// `POST …/warm` with object residency: forwarded, and the object's answer if it comes within
/// `WARM_ANSWER_WAIT_MS` (resident, or an error found at once); else `202 loading` while the
/// forward goes on under this request's `waitUntil` until the object has its slice.
pub async fn forward_warm(
    req: Request,
    env: &Env,
    ctx: &Context,
    cfg: &Settings,
) -> Result<Response, ApiError> {
    let (env, owned) = (env.clone(), cfg.clone());
    let work = async move { forward(req, &env, &owned, Route::Warm).await };
    let (forwarded, answer) = work.remote_handle();
    ctx.wait_until(forwarded);
    let wait = Delay::from(Duration::from_secs_f64(WARM_ANSWER_WAIT_MS / 1000.0));
    match select(answer, wait).await {
        Either::Left((answered, _)) => answered,
        Either::Right((_, answer)) => {
            answer.forget();
            let report = warming_report(cfg);
            Ok(Response::from_json(&report)?.with_status(report.status()))
        }
    }
}

/// This build's forward version: `FORWARD_VERSION`, or in the test build the variable
/// `TEST_FORWARD_VERSION`, so that a test plays a rollout's two builds side by side.
#[cfg(feature = "fault-injection")]
fn forward_version(env: &Env) -> u32 {
    let played = config::var(env, "TEST_FORWARD_VERSION").and_then(|v| v.parse().ok());
    played.unwrap_or(FORWARD_VERSION)
}

/// This build's forward version.
#[cfg(not(feature = "fault-injection"))]
fn forward_version(_env: &Env) -> u32 {
    FORWARD_VERSION
}

/// Marks a forward (or the object's answer to one) with this build's forward version.
fn mark_forward(headers: &mut Headers, env: &Env) -> worker::Result<()> {
    headers.set(header::FORWARD, &forward_version(env).to_string())?;
    headers.set(header::BUILD, BUILD)?;
    Ok(())
}

/// The `503 build_mismatch` when the peer that sent `headers` speaks another forward version.
fn mismatch(headers: &Headers, env: &Env) -> Option<ShardError> {
    let said = |name| headers.get(name).ok().flatten();
    forward_mismatch(
        said(header::FORWARD).as_deref(),
        (BUILD, forward_version(env)),
        said(header::BUILD).as_deref(),
    )
}

/// `ShardObject.fetch`: a request the front forwarded (access already granted).
#[wasm_bindgen(js_name = objectFetch)]
pub async fn object_fetch(
    req: web_sys::Request,
    env: Env,
    state: DurableObjectState,
) -> Result<web_sys::Response, JsValue> {
    let (state, req) = (State::from(state), Request::from(req));
    let answer = match mismatch(req.headers(), &env) {
        Some(e) => Err(e.into()),
        None => in_object(req, &env, &state).await,
    };
    let mut answer = answer.unwrap_or_else(|e| e.answer(&env));
    mark_forward(answer.headers_mut(), &env)?;
    Ok(answer.into())
}

async fn in_object(req: Request, env: &Env, state: &State) -> Result<Response, ApiError> {
    handlers::note_start();
    let route = route_of(&req)?;
    #[cfg(feature = "fault-injection")]
    if route == Route::Alarm {
        return crate::fault::alarm(state).await;
    }
    let cfg = config::settings(env)?;
    // Work keeps an object warm; a probe (`/healthz`) does not, or a monitor would keep every
    // object resident (and billed) for ever.
    if matches!(route, Route::LmHead | Route::Warm) {
        let now = js_sys::Date::now();
        let alarm = KEEP_WARM.with(|k| k.on_request(&object_id(state), now, &cfg));
        set_alarm(state, &cfg, alarm).await;
    }
    if route == Route::Warm {
        return handlers::warm_until_resident(&cfg, env, state.id().name(), &req).await;
    }
    let keep_alive = |work| state.wait_until(work);
    let scope = Scope {
        env,
        keep_alive: &keep_alive,
        object: state.id().name(),
    };
    serve(route, req, &cfg, &scope).await
}

/// `ShardObject.alarm`: the keep-warm alarm.
#[wasm_bindgen(js_name = objectAlarm)]
pub async fn object_alarm(env: Env, state: DurableObjectState) {
    let state = State::from(state);
    match config::settings(&env) {
        Ok(cfg) => {
            let next =
                KEEP_WARM.with(|k| k.on_alarm(&object_id(&state), js_sys::Date::now(), &cfg));
            set_alarm(&state, &cfg, next).await;
        }
        Err(e) => keep_warm_failed(telemetry::shard_index(&env), &e.to_string()),
    }
}

/// Logs that the keep-warm alarm failed (`cobordism_shard::Event::KeepWarmFailed`).
fn keep_warm_failed(shard: Option<usize>, why: &str) {
    telemetry::event(&Event::KeepWarmFailed { shard, why });
}

/// The object's id, the key of its keep-warm state (objects of one class may share an isolate).
fn object_id(state: &State) -> String {
    state.id().to_string()
}

/// Sets the object's alarm `in_ms` from now, if asked, and holds a timer as long in its
/// isolate (`cobordism_shard::object`: the pending timer keeps the object from hibernating
/// until the alarm comes); a failure is logged and forgotten, so that the next request sets it
/// again.
async fn set_alarm(state: &State, cfg: &Settings, in_ms: Option<f64>) {
    let Some(in_ms) = in_ms else { return };
    if let Err(e) = state.storage().set_alarm(in_ms as i64).await {
        keep_warm_failed(Some(cfg.shard_index), &format!("alarm not set: {e}"));
        KEEP_WARM.with(|k| k.alarm_failed(&object_id(state)));
        return;
    }
    let timer = Delay::from(Duration::from_secs_f64(in_ms / 1000.0));
    wasm_bindgen_futures::spawn_local(timer);
}
