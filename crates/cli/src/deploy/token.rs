//! The deployment's bearer tokens, in files of the state directory readable by their owner only:
//! `token` (the one callers use), `token.next` (a rotation's new token until every front accepts
//! it) and `token.previous` (the old one, accepted until the rotation finishes).
//!
//! The token of a first deploy is `COBORDISM_TOKEN` when set (said so), else a new random one
//! (256 bits). Afterwards the file is the token: a `COBORDISM_TOKEN` that differs from it is
//! never used in its place, only warned about (it is usually a stale export from before a
//! rotation).

use anyhow::{bail, Context, Result};

use super::record::{remove, StateDir};

/// The token callers use.
pub const CURRENT: &str = "token";
/// A rotation's new token, before every front accepts it.
pub const NEXT: &str = "token.next";
/// The token a rotation retires, while it is still accepted.
pub const PREVIOUS: &str = "token.previous";

/// The environment variable callers give the token in.
pub const TOKEN_ENV: &str = "COBORDISM_TOKEN";

/// A new random token: 32 bytes from the operating system, in hex.
pub fn new_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The token in file `name`, if the file exists.
pub fn read(state: &StateDir, name: &str) -> Result<Option<String>> {
    let path = state.file(name);
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().is_empty() => bail!("{} is empty", path.display()),
        Ok(text) => Ok(Some(text.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The token in file `name`, which must exist.
pub fn require(state: &StateDir, name: &str) -> Result<String> {
    read(state, name)?.with_context(|| {
        format!(
            "{} is missing: the deployment's token state needs it",
            state.file(name).display()
        )
    })
}

/// Writes `token` to file `name` (owner only), whole or not at all.
pub fn write(state: &StateDir, name: &str, token: &str) -> Result<()> {
    state.write(name, &format!("{token}\n"), true)
}

/// Removes file `name`.
pub fn delete(state: &StateDir, name: &str) -> Result<()> {
    remove(&state.file(name))
}

/// The token a deploy puts on the fronts, and whether it was just made: the file's; for a first
/// deploy `COBORDISM_TOKEN` or a new one, written to the file before any Worker changes.
pub fn for_deploy(state: &StateDir, env_token: Option<&str>) -> Result<String> {
    if let Some(token) = read(state, CURRENT)? {
        if env_token.is_some_and(|e| !e.is_empty() && e != token) {
            eprintln!(
                "deploy: {TOKEN_ENV} differs from the deployment's token in {}, which stays the \
                 token (export the file's token to use the shards)",
                state.file(CURRENT).display()
            );
        }
        return Ok(token);
    }
    let token = match env_token.filter(|t| !t.is_empty()) {
        Some(t) => {
            eprintln!("deploy: the shards' token is {TOKEN_ENV} (from your environment)");
            t.to_string()
        }
        None => new_token()?,
    };
    write(state, CURRENT, &token)?;
    eprintln!(
        "deploy: the shards' bearer token is in {} (readable by you alone)",
        state.file(CURRENT).display()
    );
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_tokens_are_64_hex_digits_and_differ() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn the_recorded_token_wins_over_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            dir: dir.path().into(),
        };
        assert_eq!(for_deploy(&state, Some("mine")).unwrap(), "mine");
        assert_eq!(read(&state, CURRENT).unwrap().as_deref(), Some("mine"));
        assert_eq!(for_deploy(&state, Some("stale")).unwrap(), "mine");
        assert_eq!(for_deploy(&state, None).unwrap(), "mine");
    }

    #[test]
    fn an_empty_token_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            dir: dir.path().into(),
        };
        state.write(CURRENT, "\n", true).unwrap();
        assert!(for_deploy(&state, None).is_err());
    }
}
