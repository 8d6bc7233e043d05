//! The Worker's variables, read on each authorized request (who may call is decided before, in
//! `auth`); what they mean, their defaults and ranges are `cobordism_shard::Settings::from_vars`.

use cobordism_shard::{Settings, ShardError};
use worker::Env;

/// The value of variable `name`, if set.
pub fn var(env: &Env, name: &str) -> Option<String> {
    env.var(name).ok().map(|v| v.to_string())
}

/// The shard's settings from the Worker's variables.
pub fn settings(env: &Env) -> Result<Settings, ShardError> {
    Settings::from_vars(|name| var(env, name))
}
